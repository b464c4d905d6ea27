#include "exec/cuda/cuda_memory_space.hpp"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_status.hpp"
#include "exec/engine/optimizer.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/optimizer.hpp"

namespace zerolens::exec {

namespace {

// The legacy default stream: cudaMemcpy and cudaMemset run there too, so everything is in order.
constexpr cudaStream_t kStream = nullptr;

kernels::cuda::ElementFormat element_format(NumberFormat format) {
  switch (format) {
    case NumberFormat::Fp32:
      return kernels::cuda::ElementFormat::fp32;
    case NumberFormat::Fp16:
      return kernels::cuda::ElementFormat::fp16;
    case NumberFormat::Bf16:
      return kernels::cuda::ElementFormat::bf16;
  }
  throw std::invalid_argument("unknown NumberFormat");
}

void* device_pointer(Numbers numbers) {
  if (numbers.format() == NumberFormat::Fp32) return numbers.wide().data();
  return numbers.narrow().data();
}

[[noreturn]] void throw_invalid(const char* operation, const char* problem) {
  throw std::invalid_argument(std::string("CudaMemorySpace::") + operation + ": " + problem);
}

void require_same_size(Numbers a, Numbers b, const char* operation) {
  if (a.size() != b.size()) throw_invalid(operation, "sizes differ");
}

// Throws for `status` as check_cuda does, first clearing the runtime's last error: a failed call
// (e.g. cudaMalloc out of memory) would otherwise be reported again by the next launch check.
[[noreturn]] void fail(cudaError_t status, const std::string& call) {
  cudaGetLastError();
  check_cuda(status, call.c_str());
  throw std::logic_error("check_cuda returned for a failure");
}

// check_cuda with the byte count in the message (composed only on failure: copies are frequent).
void check_cuda_bytes(cudaError_t status, const std::string& call, std::size_t bytes) {
  if (status != cudaSuccess) fail(status, call + " of " + std::to_string(bytes) + " bytes");
}

}  // namespace

struct CudaMemorySpace::Scratch {
  double partials[kernels::cuda::sum_of_squares_partials];
  double sum;
  int found;
};

CudaMemorySpace::~CudaMemorySpace() {
  deallocate(scratch_, sizeof(Scratch));
}

std::string CudaMemorySpace::name() const {
  return "cuda:" + std::to_string(device_);
}

void* CudaMemorySpace::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::string where = " on " + name();
  check_cuda_bytes(cudaSetDevice(device_), "cudaSetDevice" + where + " for an allocation", bytes);
  void* data = nullptr;
  check_cuda_bytes(cudaMalloc(&data, bytes), "cudaMalloc" + where, bytes);
  cudaError_t status = cudaMemset(data, 0, bytes);
  if (status == cudaSuccess) status = cudaStreamSynchronize(kStream);
  if (status != cudaSuccess) {
    cudaFree(data);
    check_cuda_bytes(status, "cudaMemset" + where, bytes);
  }
  return data;  // cudaMalloc aligns to at least 256 bytes
}

// No throwing here (destructors call it): a failure resurfaces at the next checked call.
void CudaMemorySpace::deallocate(void* pointer, std::size_t) noexcept {
  if (!pointer) return;
  cudaSetDevice(device_);
  cudaFree(pointer);
}

void CudaMemorySpace::copy_to_host(void* host, const void* here, std::size_t bytes) {
  if (bytes == 0) return;
  check_cuda_bytes(cudaSetDevice(device_), "cudaSetDevice for a copy to host", bytes);
  check_cuda_bytes(cudaMemcpy(host, here, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host",
                   bytes);
}

// cudaMemcpy may return before a copy from pageable memory or within the device has landed.
void CudaMemorySpace::copy_from_host(void* here, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  check_cuda_bytes(cudaSetDevice(device_), "cudaSetDevice for a copy from host", bytes);
  check_cuda_bytes(cudaMemcpy(here, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy from host",
                   bytes);
  synchronize("copy_from_host");
}

void CudaMemorySpace::copy_within(void* to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  check_cuda_bytes(cudaSetDevice(device_), "cudaSetDevice for a copy within the device", bytes);
  check_cuda_bytes(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice),
                   "cudaMemcpy within the device", bytes);
  synchronize("copy_within");
}

void CudaMemorySpace::convert(Numbers to, Numbers from) {
  require_same_size(to, from, "convert");
  if (!begin("convert", {to, from})) return;
  kernels::cuda::convert(device_pointer(to), element_format(to.format()), device_pointer(from),
                         element_format(from.format()), to.size(), kStream);
  synchronize("convert");
}

void CudaMemorySpace::add_scaled(Numbers to, Numbers from, float factor) {
  require_same_size(to, from, "add_scaled");
  if (!begin("add_scaled", {to, from})) return;
  kernels::cuda::add_scaled(device_pointer(to), element_format(to.format()), device_pointer(from),
                            element_format(from.format()), to.size(), factor, kStream);
  synchronize("add_scaled");
}

void CudaMemorySpace::scale(Numbers values, float factor) {
  if (!begin("scale", {values})) return;
  kernels::cuda::scale(device_pointer(values), element_format(values.format()), values.size(),
                       factor, kStream);
  synchronize("scale");
}

// All-zero bits are +0 in every format.
void CudaMemorySpace::fill_zero(Numbers values) {
  if (!begin("fill_zero", {values})) return;
  check_cuda_bytes(cudaMemset(device_pointer(values), 0, std::size_t(values.bytes())), "cudaMemset",
                   std::size_t(values.bytes()));
  synchronize("fill_zero");
}

bool CudaMemorySpace::has_inf_or_nan(Numbers values) {
  if (!begin("has_inf_or_nan", {values})) return false;
  int* found = &scratch()->found;
  check_cuda_bytes(cudaMemsetAsync(found, 0, sizeof(int), kStream),
                   "cudaMemsetAsync of the inf/NaN flag", sizeof(int));
  kernels::cuda::flag_inf_or_nan(device_pointer(values), element_format(values.format()),
                                 values.size(), found, kStream);
  int host = 0;
  check_cuda_bytes(cudaMemcpy(&host, found, sizeof(host), cudaMemcpyDeviceToHost),
                   "cudaMemcpy of the inf/NaN flag", sizeof(host));
  return host != 0;
}

double CudaMemorySpace::sum_of_squares(Numbers values) {
  if (!begin("sum_of_squares", {values})) return 0.0;
  Scratch* const device = scratch();
  kernels::cuda::sum_of_squares(device_pointer(values), element_format(values.format()),
                                values.size(), device->partials, &device->sum, kStream);
  double host = 0.0;
  check_cuda_bytes(cudaMemcpy(&host, &device->sum, sizeof(host), cudaMemcpyDeviceToHost),
                   "cudaMemcpy of a sum", sizeof(host));
  return host;
}

void CudaMemorySpace::optimizer_update(const Optimizer& optimizer, Numbers params, Numbers grads,
                                       Numbers first, Numbers second) {
  for (const Numbers numbers : {params, grads, first, second}) {
    if (numbers.format() != NumberFormat::Fp32)
      throw_invalid("optimizer_update", "fp32 numbers only");
  }
  require_same_size(params, grads, "optimizer_update");
  const std::size_t states = optimizer.state_per_element();
  if (states >= 1) require_same_size(params, first, "optimizer_update");
  if (states >= 2) require_same_size(params, second, "optimizer_update");
  if (!begin("optimizer_update", {params, grads, first, second})) return;
  const OptimizerConfig& config = optimizer.config();
  if (config.type == OptimizerType::Sgd) {
    kernels::cuda::sgd_step(params.wide().data(), grads.wide().data(),
                            states ? first.wide().data() : nullptr, params.size(),
                            optimizer.sgd_config(), kStream);
  } else {
    const kernels::cuda::AdamTensor tensor{.master = params.wide().data(),
                                           .grads = grads.wide().data(),
                                           .exp_avg = first.wide().data(),
                                           .exp_avg_sq = second.wide().data(),
                                           .count = params.size()};
    // No 16-bit copy is written (no half_copy), so the copy format is immaterial.
    kernels::cuda::adam_step_multi_tensor({&tensor, 1}, kernels::cuda::GradFormat::fp32,
                                          kernels::cuda::HalfFormat::bf16, optimizer.adam_config(),
                                          optimizer.step(), kStream);
  }
  synchronize("optimizer_update");
}

CudaMemorySpace::Scratch* CudaMemorySpace::scratch() {
  if (!scratch_) {
    void* data = nullptr;
    check_cuda_bytes(cudaMalloc(&data, sizeof(Scratch)), "cudaMalloc of the reductions' scratch",
                     sizeof(Scratch));
    scratch_ = static_cast<Scratch*>(data);
  }
  return scratch_;
}

bool CudaMemorySpace::begin(const char* operation, std::initializer_list<Numbers> numbers) const {
  for (const Numbers each : numbers) {
    if (each.size() > 0 && each.space() != this)
      throw_invalid(operation, "numbers of another memory space");
  }
  if (numbers.begin()->size() == 0) return false;
  const cudaError_t status = cudaSetDevice(device_);
  if (status != cudaSuccess)
    fail(status, "cudaSetDevice(" + std::to_string(device_) + ") for " + operation);
  return true;
}

void CudaMemorySpace::synchronize(const char* operation) const {
  const cudaError_t status = cudaStreamSynchronize(kStream);
  if (status != cudaSuccess) fail(status, std::string("cudaStreamSynchronize after ") + operation);
}

}  // namespace zerolens::exec
