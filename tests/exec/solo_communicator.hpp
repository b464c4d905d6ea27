#pragma once
#include <algorithm>
#include <span>

#include "exec/comm/communicator.hpp"

namespace zerolens::testing {

// A world of one rank: the collectives are identities.
class SoloCommunicator final : public exec::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(std::span<float>) override {}
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
    std::copy(in.begin(), in.end(), out.begin());
  }
  void reduce_scatter_sum(std::span<const float> in, std::span<const int>,
                          std::span<float> out) override {
    std::copy(in.begin(), in.end(), out.begin());
  }
  void all_gather(std::span<const float> in, std::span<float> out) override {
    if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
  }
  void broadcast(std::span<float>, int) override {}
  void all_reduce_sum(std::span<std::uint16_t>, Precision) override {}
  void reduce_scatter_sum(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                          Precision) override {
    std::copy(in.begin(), in.end(), out.begin());
  }
  void reduce_scatter_sum(std::span<const std::uint16_t> in, std::span<const int>,
                          std::span<std::uint16_t> out, Precision) override {
    std::copy(in.begin(), in.end(), out.begin());
  }
  void all_gather(std::span<const std::uint16_t> in, std::span<std::uint16_t> out) override {
    if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
  }
  bool all_reduce_flag(bool flag, OpKind) override { return flag; }
  double all_reduce_max(double value, OpKind) override { return value; }
  double all_reduce_sum(double value, OpKind) override { return value; }
  float all_reduce_sum_float(float value, OpKind) override { return value; }
  double report_sum(double value) override { return value; }
  void barrier() override {}
};

}  // namespace zerolens::testing
