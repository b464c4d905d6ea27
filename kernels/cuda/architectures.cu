// The architecture list nvcc compiled this library for; host code, so it answers without a GPU.
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

std::vector<int> compiled_architectures() {
#ifdef __CUDA_ARCH_LIST__
  std::vector<int> architectures{__CUDA_ARCH_LIST__};
  for (int& architecture : architectures) architecture /= 10;  // 800 -> 80
  return architectures;
#else
  return {};
#endif
}

}  // namespace zerolens::kernels::cuda
