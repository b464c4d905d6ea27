// The NCCL-or-staged decision on hand-made identity lists, and the record the ranks exchange.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "exec/cuda/gpu_identity.hpp"

namespace zerolens::exec {
namespace {

const std::string kUuidA = "GPU-8c0e1a2b-0000-1111-2222-333344445555";
const std::string kUuidB = "GPU-8c0e1a2b-0000-1111-2222-333344446666";

TEST(GpuIdentity, SameHostSameGpuIsShared) {
  const std::vector<GpuIdentity> ranks{{"node-a", kUuidA}, {"node-a", kUuidA}};
  EXPECT_TRUE(ranks_share_a_gpu(ranks));
  const auto shared = find_shared_gpu(ranks);
  ASSERT_TRUE(shared);
  EXPECT_EQ(shared->first_rank, 0);
  EXPECT_EQ(shared->second_rank, 1);
  EXPECT_EQ(describe(*shared, ranks), "ranks 0 and 1 share GPU " + kUuidA + " on node-a");
}

TEST(GpuIdentity, SameGpuIdOnDifferentHostsIsNotShared) {
  // PCI bus ids repeat from node to node; only (host, id) names one GPU.
  const std::vector<GpuIdentity> ranks{{"node-a", "00000000:18:00.0"}, {"node-b", "00000000:18:00.0"}};
  EXPECT_FALSE(ranks_share_a_gpu(ranks));
  const std::vector<GpuIdentity> uuids{{"node-a", kUuidA}, {"node-b", kUuidA}};
  EXPECT_FALSE(ranks_share_a_gpu(uuids));
}

TEST(GpuIdentity, DifferentGpusOnOneHostAreNotShared) {
  const std::vector<GpuIdentity> ranks{{"node-a", kUuidA}, {"node-a", kUuidB}};
  EXPECT_FALSE(ranks_share_a_gpu(ranks));
}

TEST(GpuIdentity, OneOrNoRankNeverShares) {
  EXPECT_FALSE(ranks_share_a_gpu(std::vector<GpuIdentity>{}));
  EXPECT_FALSE(ranks_share_a_gpu(std::vector<GpuIdentity>{{"node-a", kUuidA}}));
}

TEST(GpuIdentity, FindsTheFirstSharingPairAmongMany) {
  // 4 ranks on 2 nodes with 2 GPUs each, then rank 4 doubles up on rank 2's GPU.
  std::vector<GpuIdentity> ranks{{"node-a", kUuidA}, {"node-a", kUuidB}, {"node-b", kUuidA}, {"node-b", kUuidB}};
  EXPECT_FALSE(ranks_share_a_gpu(ranks));
  ranks.push_back({"node-b", kUuidA});
  const auto shared = find_shared_gpu(ranks);
  ASSERT_TRUE(shared);
  EXPECT_EQ(shared->first_rank, 2);
  EXPECT_EQ(shared->second_rank, 4);
}

TEST(GpuIdentity, AnUnidentifiedGpuCountsAsShared) {
  // Two ranks that could not name their GPU might be on the same one: NCCL would fail, staging works.
  const std::vector<GpuIdentity> ranks{{"node-a", ""}, {"node-a", ""}};
  const auto shared = find_shared_gpu(ranks);
  ASSERT_TRUE(shared);
  EXPECT_EQ(describe(*shared, ranks), "ranks 0 and 1 share GPU (unidentified) on node-a");
}

TEST(GpuIdentity, UuidIsSpelledAsNvidiaSmiDoes) {
  std::array<unsigned char, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(0x10 * (i % 16) + i);
  EXPECT_EQ(format_gpu_uuid(bytes), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST(GpuIdentity, RecordRoundTripsAndTruncatesLongFields) {
  const GpuIdentity identity{"node-a.cluster", kUuidA};
  EXPECT_EQ(decode(encode(identity)), identity);
  const GpuIdentity long_one{std::string(400, 'h'), std::string(100, 'g')};
  const GpuIdentity back = decode(encode(long_one));
  EXPECT_EQ(back.host, std::string(kGpuIdentityHostChars - 1, 'h'));
  EXPECT_EQ(back.gpu, std::string(kGpuIdentityGpuChars - 1, 'g'));
}

}  // namespace
}  // namespace zerolens::exec
