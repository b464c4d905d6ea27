// The executor's host heap keeps what its buffers free (exec/memory/host_heap.hpp): a block freed
// and allocated again is not faulted in again. Without it glibc maps a 64 MiB block afresh each
// time (above its largest dynamic mmap threshold, 32 MiB): 16,384 minor faults per allocation.
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "exec/memory/host_heap.hpp"

namespace zerolens::exec {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Allocates `bytes`, writes every byte, frees them; the faults that took.
long faults_of_a_block(std::size_t bytes) {
  const long before = minor_faults();
  auto* block = static_cast<unsigned char*>(std::malloc(bytes));
  if (!block) return -1;
  std::memset(block, 1, bytes);
  const volatile unsigned char last = block[bytes - 1];  // the writes are used
  std::free(block);
  const long after = minor_faults();
  return last == 1 ? after - before : -1;
}

TEST(HostHeap, AFreedBlockIsReusedWithoutFaultingItInAgain) {
  constexpr std::size_t bytes = std::size_t{64} << 20;  // 16,384 pages of 4 KiB
  if (!keep_host_heap()) GTEST_SKIP() << "this C library has no mallopt (not glibc)";
  ASSERT_GE(faults_of_a_block(bytes), 0);  // the first use of the pages faults them in
  const long again = faults_of_a_block(bytes);
  ASSERT_GE(again, 0);
  EXPECT_LT(again, 256) << "the freed block went back to the kernel";
  EXPECT_TRUE(keep_host_heap());  // idempotent
}

}  // namespace
}  // namespace zerolens::exec
