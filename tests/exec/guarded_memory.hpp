#pragma once
// A memory space the host cannot address, for testing the engine's device seam without a GPU:
// each allocation hands out addresses in a PROT_NONE mapping (so any host read or write through
// them faults, as a host access to cudaMalloc'ed memory would) and keeps the numbers in a shadow
// allocation that the space's own operations translate to and compute on with the host code.
// Counts the operations it ran, so tests can tell the device path was taken.
// HostStagedModel lets a host LayerModel compute on views in such a space (copies in and out).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <new>
#include <stdexcept>
#include <vector>

#include "exec/engine/optimizer.hpp"
#include "exec/memory/memory_space.hpp"
#include "exec/memory/numbers.hpp"
#include "exec/model/layer_model.hpp"

namespace zerolens::testing {

class GuardedMemorySpace final : public exec::MemorySpace {
 public:
  GuardedMemorySpace() = default;
  GuardedMemorySpace(const GuardedMemorySpace&) = delete;
  GuardedMemorySpace& operator=(const GuardedMemorySpace&) = delete;
  ~GuardedMemorySpace() override {
    for (auto& [address, region] : regions_)
      munmap(reinterpret_cast<void*>(address), region.reserved);
  }

  std::string name() const override { return "guarded"; }
  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    if (bytes > capacity - live_bytes()) throw std::bad_alloc();  // as a full device would
    const auto page = std::size_t(sysconf(_SC_PAGESIZE));
    const std::size_t reserved = (bytes + page - 1) / page * page;
    void* address =
        mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (address == MAP_FAILED) throw std::bad_alloc();
    regions_.emplace(reinterpret_cast<std::uintptr_t>(address),
                     Region{reserved, std::vector<std::byte>(bytes)});
    return address;
  }
  void deallocate(void* pointer, std::size_t) noexcept override {
    const auto found = regions_.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (found == regions_.end()) return;
    munmap(pointer, found->second.reserved);
    regions_.erase(found);
  }
  void copy_to_host(void* host, const void* here, std::size_t bytes) override {
    if (bytes == 0) return;
    ++counts.copies;
    std::memcpy(host, shadow(here, bytes), bytes);
  }
  void copy_from_host(void* here, const void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    ++counts.copies;
    std::memcpy(shadow(here, bytes), host, bytes);
  }
  void copy_within(void* to, const void* from, std::size_t bytes) override {
    if (bytes == 0) return;
    ++counts.copies;
    std::memmove(shadow(to, bytes), shadow(from, bytes), bytes);
  }

  void convert(exec::Numbers to, exec::Numbers from) override {
    ++counts.element_ops;
    host(to).copy_from(host(from));
  }
  void add_scaled(exec::Numbers to, exec::Numbers from, float factor) override {
    ++counts.element_ops;
    host(to).add_scaled(host(from), factor);
  }
  void scale(exec::Numbers values, float factor) override {
    ++counts.element_ops;
    host(values).scale(factor);
  }
  void fill_zero(exec::Numbers values) override {
    ++counts.element_ops;
    host(values).fill_zero();
  }
  bool has_inf_or_nan(exec::Numbers values) override {
    ++counts.element_ops;
    return host(values).has_inf_or_nan();
  }
  double sum_of_squares(exec::Numbers values) override {
    ++counts.element_ops;
    return host(values).sum_of_squares();
  }
  void optimizer_update(const exec::Optimizer& optimizer, exec::Numbers params, exec::Numbers grads,
                        exec::Numbers first, exec::Numbers second) override {
    ++counts.optimizer_updates;
    optimizer.update(host(params), host(grads), host(first), host(second));
  }

  // The shadow of `bytes` bytes at `address` (inside one allocation, or the end of one when empty).
  std::byte* shadow(const void* address, std::size_t bytes) {
    if (bytes == 0)
      return nullptr;  // an empty view may point anywhere (nullptr for an empty buffer)
    const auto key = reinterpret_cast<std::uintptr_t>(address);
    auto after = regions_.upper_bound(key);
    if (after == regions_.begin())
      throw std::logic_error("guarded memory: address in no allocation");
    auto& [base, region] = *std::prev(after);
    if (key + bytes > base + region.values.size())
      throw std::logic_error("guarded memory: range past its allocation");
    return region.values.data() + (key - base);
  }
  // The same numbers at their shadow's host addresses.
  exec::Numbers host(exec::Numbers numbers) {
    if (numbers.size() == 0)
      return numbers.format() == exec::NumberFormat::Fp32 ? exec::Numbers()
                                                          : exec::Numbers({}, numbers.format());
    if (numbers.space() != this) throw std::logic_error("guarded memory: numbers of another space");
    if (numbers.format() == exec::NumberFormat::Fp32) {
      auto* values =
          reinterpret_cast<float*>(shadow(numbers.wide().data(), std::size_t(numbers.bytes())));
      return exec::Numbers(std::span(values, numbers.size()));
    }
    auto* bits = reinterpret_cast<std::uint16_t*>(
        shadow(numbers.narrow().data(), std::size_t(numbers.bytes())));
    return {std::span(bits, numbers.size()), numbers.format()};
  }
  std::size_t allocations() const { return regions_.size(); }
  std::size_t live_bytes() const {
    std::size_t bytes = 0;
    for (const auto& [address, region] : regions_) bytes += region.values.size();
    return bytes;
  }
  std::size_t capacity = std::numeric_limits<std::size_t>::max();  // bytes it may hold at once

  struct Counts {
    std::int64_t copies = 0, element_ops = 0, optimizer_updates = 0;
  } counts;

 private:
  struct Region {
    std::size_t reserved = 0;
    std::vector<std::byte> values;
  };
  std::map<std::uintptr_t, Region> regions_;
};

// A host model behind device views: parameters (and gradients, in backward) are copied to host
// vectors, the model runs there, and the gradients go back.
class HostStagedModel final : public exec::LayerModel {
 public:
  HostStagedModel(exec::LayerModel& inner, exec::MemorySpace& space)
      : inner_(inner), space_(space) {}
  void init_tensor(std::int32_t tensor, std::span<float> values) const override {
    inner_.init_tensor(tensor, values);
  }
  void load_batch(std::int64_t first, std::int64_t count) override {
    inner_.load_batch(first, count);
  }
  void forward(std::size_t layer, exec::ParamViews params) override {
    const Staged staged = stage(params);
    inner_.forward(layer, staged.views);
  }
  void recompute(std::size_t layer, exec::ParamViews params) override {
    const Staged staged = stage(params);
    inner_.recompute(layer, staged.views);
  }
  void backward(std::size_t layer, exec::ParamViews params, exec::GradViews grads,
                float scale) override {
    const Staged staged = stage(params);
    std::vector<std::vector<float>> host_grads;
    std::vector<std::span<float>> views;
    for (const std::span<float> grad : grads) {
      host_grads.emplace_back(grad.size());
      exec::Numbers(grad, &space_).read(host_grads.back());
      views.emplace_back(host_grads.back());
    }
    inner_.backward(layer, staged.views, views, scale);
    for (std::size_t i = 0; i < grads.size(); ++i)
      exec::Numbers(grads[i], &space_).write(host_grads[i]);
  }
  double loss() const override { return inner_.loss(); }

 private:
  struct Staged {
    std::vector<std::vector<float>> values;
    std::vector<std::span<const float>> views;
  };
  Staged stage(exec::ParamViews params) {
    Staged staged;
    staged.values.reserve(params.size());
    for (const std::span<const float> param : params) {
      staged.values.emplace_back(param.size());
      exec::Numbers(std::span(const_cast<float*>(param.data()), param.size()), &space_)
          .read(staged.values.back());
      staged.views.emplace_back(staged.values.back());
    }
    return staged;
  }
  exec::LayerModel& inner_;
  exec::MemorySpace& space_;
};

}  // namespace zerolens::testing
