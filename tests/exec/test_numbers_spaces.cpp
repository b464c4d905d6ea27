// Numbers in a memory space the host cannot address (the engine's device seam,
// exec/memory/memory_space.hpp) against the same numbers in host memory: every operation and every
// copy between places gives the same bits, the host never touches the space's addresses (they
// fault), buffers are charged to the ledger as host ones are, and collectives reach a host-only
// communicator through host copies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "exec/memory/numbers.hpp"
#include "guarded_memory.hpp"
#include "kernels/precision.hpp"
#include "solo_communicator.hpp"
#include "toy_model.hpp"

namespace zerolens::exec {
namespace {

using testing::GuardedMemorySpace;

constexpr NumberFormat kFormats[] = {NumberFormat::Fp32, NumberFormat::Fp16, NumberFormat::Bf16};
constexpr std::size_t kCount = 300;  // past one 256-element chunk of the host loops

// Values across magnitudes, with halfway cases of 16-bit rounding and negative zero.
std::vector<float> sample_values(std::uint64_t seed) {
  std::vector<float> values(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    const double noise = testing::unit_noise(seed * 1000 + i);
    values[i] = float(noise * std::pow(2.0, double(i % 30) - 22.0) /* within fp16 range */);
  }
  values[3] = 1.0f + 1.0f / 256.0f;   // a bf16 tie
  values[4] = 1.0f + 1.0f / 2048.0f;  // an fp16 tie
  values[5] = -0.0f;
  return values;
}

// One buffer in host memory and one in the guarded space, holding the same numbers.
struct Pair {
  Pair(MemoryLedger& host_ledger, MemoryLedger& device_ledger, NumberFormat format,
       std::uint64_t seed)
      : host(host_ledger, Device::Gpu, Component::GradsFull, format, kCount),
        device(device_ledger, Device::Gpu, Component::GradsFull, format, kCount) {
    const std::vector<float> values = sample_values(seed);
    host.view().write(values);
    device.view().write(values);
  }
  NumberBuffer host, device;
};

std::vector<float> widened(Numbers numbers) {
  std::vector<float> values(numbers.size());
  numbers.read(values);
  return values;
}

void expect_same_bits(Numbers host, Numbers device) {
  ASSERT_TRUE(host.on_host());
  ASSERT_FALSE(device.on_host());
  const std::vector<float> a = widened(host), b = widened(device);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i])) << i;
  }
}

class NumbersInASpace : public ::testing::Test {
 protected:
  NumbersInASpace() { device_ledger.place(Device::Gpu, &space); }
  GuardedMemorySpace space;
  MemoryLedger host_ledger, device_ledger;
};

TEST_F(NumbersInASpace, BuffersAreChargedAsHostOnesAndFreed) {
  {
    Pair pair(host_ledger, device_ledger, NumberFormat::Bf16, 1);
    EXPECT_FALSE(pair.device.view().on_host());
    EXPECT_EQ(pair.device.view().space(), &space);
    EXPECT_EQ(space.allocations(), 1u);
    EXPECT_EQ(device_ledger.current(Device::Gpu, Component::GradsFull), Bytes(2 * kCount));
    EXPECT_EQ(device_ledger.current(Device::Gpu), host_ledger.current(Device::Gpu));
    ScratchFloats scratch(device_ledger, Device::Gpu, 10);
    EXPECT_EQ(scratch.view().space(), &space);
    EXPECT_EQ(device_ledger.scratch_current(Device::Gpu), Bytes(40));
  }
  EXPECT_EQ(space.allocations(), 0u);
  EXPECT_EQ(device_ledger.current(Device::Gpu), 0);
  EXPECT_EQ(device_ledger.scratch_current(Device::Gpu), 0);
  // the host optimizer's device keeps host memory
  NumberBuffer on_cpu(device_ledger, Device::Cpu, Component::MasterPartition, NumberFormat::Fp32,
                      4);
  EXPECT_TRUE(on_cpu.view().on_host());
}

TEST_F(NumbersInASpace, HostAccessToTheSpaceFaults) {
  Pair pair(host_ledger, device_ledger, NumberFormat::Fp32, 2);
  const float* address = pair.device.view().wide().data();
  EXPECT_DEATH(
      {
        volatile float value = *address;
        (void)value;
      },
      "");
  EXPECT_EQ(pair.device.get(7), pair.host.get(7));  // through the space: fine
}

TEST_F(NumbersInASpace, ElementOperationsGiveTheHostBits) {
  for (const NumberFormat to : kFormats) {
    for (const NumberFormat from : kFormats) {
      SCOPED_TRACE(::testing::Message() << int(to) << " <- " << int(from));
      Pair target(host_ledger, device_ledger, to, 3), source(host_ledger, device_ledger, from, 4);
      target.host.view(10, 200).add_scaled(source.host.view(20, 200), 0.37f);
      target.device.view(10, 200).add_scaled(source.device.view(20, 200), 0.37f);
      expect_same_bits(target.host.view(), target.device.view());
      target.host.view(1, 250).copy_from(source.host.view(0, 250));
      target.device.view(1, 250).copy_from(source.device.view(0, 250));
      expect_same_bits(target.host.view(), target.device.view());
    }
    Pair pair(host_ledger, device_ledger, to, 5);
    pair.host.view(3, 100).scale(-1.7f);
    pair.device.view(3, 100).scale(-1.7f);
    expect_same_bits(pair.host.view(), pair.device.view());
    EXPECT_EQ(pair.host.view().sum_of_squares(), pair.device.view().sum_of_squares());
    EXPECT_FALSE(pair.device.view().has_inf_or_nan());
    pair.device.view(299, 1).write(std::vector<float>{std::numeric_limits<float>::quiet_NaN()});
    EXPECT_TRUE(pair.device.view().has_inf_or_nan());
    EXPECT_FALSE(pair.device.view(0, 299).has_inf_or_nan());
    pair.device.view(5, 50).fill_zero();
    EXPECT_EQ(pair.device.view(5, 50).sum_of_squares(), 0.0);
  }
  EXPECT_GT(space.counts.element_ops, 0);
}

// Host <-> space and space <-> another space, with and without a change of format.
TEST_F(NumbersInASpace, CopiesBetweenPlacesConvertLikeTheHost) {
  GuardedMemorySpace other;
  MemoryLedger other_ledger;
  other_ledger.place(Device::Gpu, &other);
  for (const NumberFormat to : kFormats) {
    for (const NumberFormat from : kFormats) {
      SCOPED_TRACE(::testing::Message() << int(to) << " <- " << int(from));
      Pair source(host_ledger, device_ledger, from, 6);
      NumberBuffer host_target(host_ledger, Device::Gpu, Component::GradsFull, to, kCount);
      NumberBuffer device_target(device_ledger, Device::Gpu, Component::GradsFull, to, kCount);
      NumberBuffer other_target(other_ledger, Device::Gpu, Component::GradsFull, to, kCount);
      host_target.view().copy_from(source.host.view());
      device_target.view().copy_from(source.host.view());  // host -> space
      expect_same_bits(host_target.view(), device_target.view());
      NumberBuffer back(host_ledger, Device::Gpu, Component::GradsFull, to, kCount);
      back.view().copy_from(source.device.view());  // space -> host
      expect_same_bits(back.view(), device_target.view());
      other_target.view().copy_from(source.device.view());  // space -> another space
      expect_same_bits(host_target.view(), other_target.view());
      // accumulation across places: a host partition adding a device bucket, and the reverse
      host_target.view().add_scaled(source.device.view(), 0.5f);
      device_target.view().add_scaled(source.host.view(), 0.5f);
      expect_same_bits(host_target.view(), device_target.view());
    }
  }
}

TEST_F(NumbersInASpace, OptimizerUpdatesInTheSpaceAsOnTheHost) {
  OptimizerConfig config;
  config.type = OptimizerType::AdamW;
  config.weight_decay = 0.1;
  Optimizer optimizer(config);
  Pair params(host_ledger, device_ledger, NumberFormat::Fp32, 7),
      grads(host_ledger, device_ledger, NumberFormat::Fp32, 8);
  NumberBuffer m_host(host_ledger, Device::Gpu, Component::OptimizerStatePartition,
                      NumberFormat::Fp32, kCount);
  NumberBuffer v_host(host_ledger, Device::Gpu, Component::OptimizerStatePartition,
                      NumberFormat::Fp32, kCount);
  NumberBuffer m_device(device_ledger, Device::Gpu, Component::OptimizerStatePartition,
                        NumberFormat::Fp32, kCount);
  NumberBuffer v_device(device_ledger, Device::Gpu, Component::OptimizerStatePartition,
                        NumberFormat::Fp32, kCount);
  for (int step = 0; step < 3; ++step) {
    optimizer.begin_step();
    optimizer.update(params.host.view(), grads.host.view(), m_host.view(), v_host.view());
    optimizer.update(params.device.view(), grads.device.view(), m_device.view(), v_device.view());
  }
  expect_same_bits(params.host.view(), params.device.view());
  expect_same_bits(v_host.view(), v_device.view());
  EXPECT_EQ(space.counts.optimizer_updates, 3);
  EXPECT_THROW(
      optimizer.update(params.device.view(), grads.host.view(), m_device.view(), v_device.view()),
      std::invalid_argument);
}

// SoloCommunicator copies its inputs to its outputs on the host: it would fault on the space's
// addresses, so passing shows the collectives handed it host copies and wrote the results back.
TEST_F(NumbersInASpace, CollectivesStageThroughTheHostForAHostCommunicator) {
  testing::SoloCommunicator comm;
  for (const NumberFormat format : kFormats) {
    Pair input(host_ledger, device_ledger, format, 9);
    NumberBuffer output(device_ledger, Device::Gpu, Component::ReduceBucket, format, kCount);
    reduce_scatter_sum(comm, input.device.view(), output.view());
    expect_same_bits(input.host.view(), output.view());
    output.view().fill_zero();
    const std::vector<int> counts{int(kCount)};
    reduce_scatter_sum(comm, input.device.view(), counts, output.view());
    expect_same_bits(input.host.view(), output.view());
    output.view().fill_zero();
    all_gather(comm, input.device.view(), output.view());
    expect_same_bits(input.host.view(), output.view());
    all_reduce_sum(comm, output.view());
    expect_same_bits(input.host.view(), output.view());
  }
}

// A one-rank communicator that, like NCCL, reads only the device's space: it faults on host
// addresses (shadow() throws) and on none of the space's.
class SpaceCommunicator final : public Communicator {
 public:
  explicit SpaceCommunicator(GuardedMemorySpace& space) : space_(space) {}
  MemorySpace* memory_space() const override { return &space_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(std::span<float> buffer) override { here(buffer); }
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
    copy(in, out);
  }
  void reduce_scatter_sum(std::span<const float> in, std::span<const int>,
                          std::span<float> out) override {
    copy(in, out);
  }
  void all_gather(std::span<const float> in, std::span<float> out) override { copy(in, out); }
  void broadcast(std::span<float> buffer, int) override { here(buffer); }
  void all_reduce_sum(std::span<std::uint16_t> buffer, Precision) override { here(buffer); }
  void reduce_scatter_sum(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                          Precision) override {
    copy(in, out);
  }
  void reduce_scatter_sum(std::span<const std::uint16_t> in, std::span<const int>,
                          std::span<std::uint16_t> out, Precision) override {
    copy(in, out);
  }
  void all_gather(std::span<const std::uint16_t> in, std::span<std::uint16_t> out) override {
    copy(in, out);
  }
  bool all_reduce_flag(bool flag, OpKind) override { return flag; }
  double all_reduce_max(double value, OpKind) override { return value; }
  double all_reduce_sum(double value, OpKind) override { return value; }
  float all_reduce_sum_float(float value, OpKind) override { return value; }
  double report_sum(double value) override { return value; }
  void barrier() override {}

 private:
  template <typename T>
  std::byte* here(std::span<T> values) {
    return space_.shadow(values.data(), values.size_bytes());
  }
  template <typename T>
  void copy(std::span<const T> in, std::span<T> out) {
    std::memmove(here(out), here(in), in.size_bytes());
  }
  GuardedMemorySpace& space_;
};

TEST_F(NumbersInASpace, CollectivesStageHostBuffersIntoADeviceCommunicatorsSpace) {
  SpaceCommunicator comm(space);
  for (const NumberFormat format : kFormats) {
    Pair input(host_ledger, device_ledger, format, 10);
    NumberBuffer device_output(device_ledger, Device::Gpu, Component::ReduceBucket, format, kCount);
    NumberBuffer host_output(host_ledger, Device::Gpu, Component::ReduceBucket, format, kCount);
    const std::int64_t copies = space.counts.copies;
    all_gather(comm, input.device.view(), device_output.view());  // in the space: no copy
    EXPECT_EQ(space.counts.copies, copies);
    expect_same_bits(input.host.view(), device_output.view());
    reduce_scatter_sum(comm, input.host.view(), host_output.view());  // both staged
    all_gather(comm, input.host.view(), device_output.view());        // the input staged
    EXPECT_GT(space.counts.copies, copies);
    expect_same_bits(host_output.view(), device_output.view());
    all_reduce_sum(comm, host_output.view());
    expect_same_bits(host_output.view(), device_output.view());
  }
  EXPECT_EQ(space.allocations(), 0u);  // the staged copies went with their collectives
}

}  // namespace
}  // namespace zerolens::exec
