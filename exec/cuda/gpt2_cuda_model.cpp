// CudaGpt2Model: its device buffers, its backend (the cuBLAS handles, the copies) and the layer
// steps of exec/model/gpt2_layers.hpp over them.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/cuda/cuda_status.hpp"
#include "exec/cuda/gpt2_cuda_backend.hpp"
#include "exec/cuda/gpt2_cuda_model.hpp"
#include "exec/memory/memory_space.hpp"
#include "exec/model/gpt2_layers.hpp"

namespace zerolens::exec {

HeldDeviceBuffer::HeldDeviceBuffer(MemoryLedger& ledger, Component component, std::size_t count, HeldAs held) {
  if (held.per_element == 0 || held.per_element > sizeof(float)) {
    throw std::logic_error("memory ledger: a device buffer held as " + std::to_string(held.per_element) +
                           " bytes per element of " + std::to_string(sizeof(float)));
  }
  // Memory first: a failed allocation leaves the ledger untouched. In the space the engine's device
  // buffers are in where there is one (the device communicator's caching allocator), else cudaMalloc.
  space_ = ledger.space(Device::Gpu);
  if (count > 0) {
    void* data = space_ ? space_->allocate(count * sizeof(float)) : cuda_memory_detail::allocate_device(count * sizeof(float));
    data_ = static_cast<float*>(data);
  }
  count_ = count;
  scratch_ = Bytes(count * (sizeof(float) - held.per_element));
  charge_ = cuda_memory_detail::LedgerCharge(ledger, Device::Gpu, component, Bytes(count * held.per_element));
  ledger_ = &ledger;
  ledger.allocate_scratch(Device::Gpu, scratch_);
}

void HeldDeviceBuffer::reset() {
  if (ledger_ == nullptr) return;
  charge_.release();
  ledger_->release_scratch(Device::Gpu, scratch_);
  if (data_ != nullptr && space_) space_->deallocate(data_, count_ * sizeof(float));
  if (data_ != nullptr && !space_) cuda_memory_detail::free_device(data_);
  ledger_ = nullptr;
  space_ = nullptr;
  data_ = nullptr;
  count_ = 0;
  scratch_ = 0;
}

void HeldDeviceBuffer::swap(HeldDeviceBuffer& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(count_, other.count_);
  charge_.swap(other.charge_);
  std::swap(ledger_, other.ledger_);
  std::swap(space_, other.space_);
  std::swap(scratch_, other.scratch_);
}

void HeldDeviceBuffer::copy_from_host(std::span<const float> host) {
  if (host.size() != count_) throw_buffer_size_mismatch(count_, host.size());
  cuda_memory_detail::copy_to_device(data_, host.data(), host.size_bytes());
}

void HeldDeviceBuffer::copy_to_host(std::span<float> host) const {
  if (host.size() != count_) throw_buffer_size_mismatch(count_, host.size());
  cuda_memory_detail::copy_to_host(host.data(), data_, host.size_bytes());
}

namespace {

// Copies `rows` rows of `width` floats between row strides (in floats) on `stream`.
void copy_rows(float* to, std::size_t to_stride, const float* from, std::size_t from_stride, std::size_t rows,
               std::size_t width, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  check_cuda(cudaMemcpy2DAsync(to, to_stride * sizeof(float), from, from_stride * sizeof(float), width * sizeof(float),
                               rows, cudaMemcpyDeviceToDevice, stream),
             "cudaMemcpy2DAsync");
}

}  // namespace

CudaGpt2Backend::CudaGpt2Backend(MemoryLedger& ledger) : ledger_(&ledger) {
  const DriverMemorySnapshot before = DriverMemorySnapshot::take(ledger);
  blas_ = std::make_unique<kernels::cuda::BlasHandles>();
  const DriverMemorySnapshot after = DriverMemorySnapshot::take(ledger);
  workspace_bytes_ = std::max(unaccounted_growth(before, after), Bytes(blas_->workspace_bytes()));
  workspace_charge_ = cuda_memory_detail::LedgerCharge(
      ledger, Device::Gpu, Component::LibraryWorkspace, workspace_bytes_);
}

std::vector<float> CudaGpt2Backend::to_host(const Buffer& buffer) {
  std::vector<float> host(buffer.size());
  buffer.copy_to_host(host);
  return host;
}

void CudaGpt2Backend::copy(float* to, const float* from, std::size_t count) const {
  if (count == 0) return;
  check_cuda(cudaMemcpyAsync(to, from, count * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
             "cudaMemcpyAsync");
}

void CudaGpt2Backend::copy_to_fused(float* fused, const float* part, std::size_t block,
                                    std::size_t rows, std::size_t width) const {
  copy_rows(fused + block * width, 3 * width, part, width, rows, width, stream_);
}

void CudaGpt2Backend::copy_from_fused(float* part, const float* fused, std::size_t block,
                                      std::size_t rows, std::size_t width) const {
  copy_rows(part, width, fused + block * width, 3 * width, rows, width, stream_);
}

struct CudaGpt2Model::State : Gpt2Layers<CudaGpt2Backend> {
  using Gpt2Layers::Gpt2Layers;
};

// The shape check comes first, so a refused description never touches CUDA.
CudaGpt2Model::CudaGpt2Model(const Model& model, const Gpt2Options& options, MemoryLedger& ledger)
    : state_(std::make_unique<State>(model, options, ledger, gpt2_layout(model, options))) {}

CudaGpt2Model::~CudaGpt2Model() = default;

Bytes CudaGpt2Model::library_workspace_bytes() const {
  return state_->backend.workspace_bytes();
}

void CudaGpt2Model::init_tensor(std::int32_t tensor, std::span<float> values) const {
  gpt2_init_tensor(state_->model, state_->options.seed, tensor, values);
}

void CudaGpt2Model::load_batch(std::int64_t first_sample, std::int64_t count) {
  state_->load_batch(first_sample, count);
}

void CudaGpt2Model::forward(std::size_t layer, ParamViews params) {
  state_->forward(layer, params);
}

void CudaGpt2Model::recompute(std::size_t layer, ParamViews params) {
  state_->recompute(layer, params);
}

void CudaGpt2Model::backward(std::size_t layer, ParamViews params, GradViews grads, float scale) {
  state_->backward(layer, params, grads, scale);
}

double CudaGpt2Model::loss() const { return state_->loss; }

}  // namespace zerolens::exec
