// What holds with or without a GPU: the device probe answers instead of crashing, errors name the
// failing call, and the library carries machine code for both sm_80 and sm_90.
#include <elf.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {
namespace {

using ::testing::HasSubstr;

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no exception)";
}

TEST(CudaRuntime, DeviceProbeAnswersWithAReasonInsteadOfFailing) {
  const DeviceProbe probe = probe_devices();
  EXPECT_GE(probe.count, 0);
  if (probe.count == 0) {
    EXPECT_THAT(probe.reason, HasSubstr("cudaGetDeviceCount"));
  } else {
    EXPECT_TRUE(probe.reason.empty()) << probe.reason;
  }
}

TEST(CudaRuntime, ErrorsNameTheCallAndTheError) {
  const std::string cuda = message_of([] { check(cudaErrorMemoryAllocation, "cudaMalloc"); });
  EXPECT_THAT(cuda, HasSubstr("cudaMalloc: "));
  EXPECT_THAT(cuda, HasSubstr("cudaErrorMemoryAllocation"));
  const std::string blas =
      message_of([] { check_blas(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate"); });
  EXPECT_THAT(blas, HasSubstr("cublasCreate: "));
  EXPECT_THAT(blas, HasSubstr("CUBLAS_STATUS_NOT_INITIALIZED"));
  EXPECT_NO_THROW(check(cudaSuccess, "cudaMemcpy"));
}

TEST(CudaRuntime, WithoutADeviceAllocationsAndHandlesThrowCleanly) {
  if (probe_devices().count > 0)
    GTEST_SKIP() << "a CUDA device is present: covered by the GPU tests";
  EXPECT_THAT(message_of([] { DeviceBuffer<float> buffer(1024); }), HasSubstr("cudaMalloc"));
  EXPECT_THAT(message_of([] { BlasHandles handles; }), HasSubstr("cublas"));
  DeviceBuffer<float> empty(0);  // nothing to allocate: no CUDA call, no error
  EXPECT_EQ(empty.data(), nullptr);
}

// The architectures the build asked for (CMAKE_CUDA_ARCHITECTURES: 80 and 90 by default, as CI
// builds; 90 alone for the device machine).
std::vector<unsigned> configured_architectures() {
  std::vector<unsigned> architectures;
  std::string text = ZEROLENS_CUDA_ARCHITECTURES;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    architectures.push_back(unsigned(std::stoul(text.substr(start, end - start))));
    start = end + 1;
  }
  return architectures;
}

TEST(CudaBuild, CompiledForEachConfiguredArchitecture) {
  const std::vector<int> compiled = compiled_architectures();
  ASSERT_FALSE(configured_architectures().empty());
  for (const unsigned architecture : configured_architectures()) {
    EXPECT_NE(std::find(compiled.begin(), compiled.end(), int(architecture)), compiled.end()) << architecture;
  }
}

// The SM architectures of the ELF (cubin) entries in this executable's .nv_fatbin section. A
// fatbin is a 16-byte header (magic 0xBA55ED50, version, header size, size of the entries) followed
// by entries, each with its own header: kind (1 PTX, 2 ELF) at byte 0, header size at 4, payload
// size at 8 and the architecture (e.g. 80) at 28.
std::set<unsigned> fatbin_cubin_architectures(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> image{std::istreambuf_iterator<char>(file), {}};
  const auto read = [&](std::size_t offset, auto value) {
    if (offset + sizeof value > image.size()) throw std::out_of_range("truncated image");
    std::memcpy(&value, image.data() + offset, sizeof value);
    return value;
  };
  const auto elf = read(0, Elf64_Ehdr{});
  const auto section = [&](unsigned index) {
    return read(elf.e_shoff + std::size_t(index) * elf.e_shentsize, Elf64_Shdr{});
  };
  const Elf64_Shdr names = section(elf.e_shstrndx);
  std::set<unsigned> architectures;
  for (unsigned index = 0; index < elf.e_shnum; ++index) {
    const Elf64_Shdr header = section(index);
    if (std::strcmp(image.data() + names.sh_offset + header.sh_name, ".nv_fatbin") != 0) continue;
    const std::size_t end = header.sh_offset + header.sh_size;
    std::size_t offset = header.sh_offset;
    while (offset + 16 <= end) {
      if (read(offset, std::uint32_t{}) != 0xBA55ED50u) {
        offset += 8;  // padding between the fatbins of different objects
        continue;
      }
      const std::size_t entries = offset + read(offset + 6, std::uint16_t{});
      const std::size_t fatbin_end = entries + read(offset + 8, std::uint64_t{});
      for (std::size_t entry = entries; entry < fatbin_end;) {
        if (read(entry, std::uint16_t{}) == 2)
          architectures.insert(read(entry + 28, std::uint32_t{}));
        entry += read(entry + 4, std::uint32_t{}) + read(entry + 8, std::uint64_t{});
      }
      offset = fatbin_end;
    }
  }
  return architectures;
}

TEST(CudaBuild, FatbinHoldsMachineCodeForEachConfiguredArchitecture) {
  const std::set<unsigned> architectures = fatbin_cubin_architectures("/proc/self/exe");
  std::string listed;
  for (unsigned architecture : architectures) listed += " sm_" + std::to_string(architecture);
  for (const unsigned architecture : configured_architectures()) {
    EXPECT_TRUE(architectures.count(architecture)) << "sm_" << architecture << " missing; cubins found:" << listed;
  }
}

}  // namespace
}  // namespace zerolens::kernels::cuda
