#include "kernels/stream.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

// OpenBLAS's own thread pool (weak: another BLAS the build may link has none).
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));

namespace zerolens::kernels {

void set_host_threads(int threads) {
  if (threads < 1) threads = 1;
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(threads);
}

int host_thread_count(int requested) {
#ifdef _OPENMP
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

void stream_fill(float* a, float value, std::size_t count, int threads) {
  const int used = host_thread_count(threads);
  (void)used;  // unused when built without OpenMP
#pragma omp parallel for simd schedule(static) num_threads(used)
  for (std::size_t i = 0; i < count; ++i) a[i] = value;
}

void stream_copy(float* a, const float* b, std::size_t count, int threads) {
  const int used = host_thread_count(threads);
  (void)used;
#pragma omp parallel for simd schedule(static) num_threads(used)
  for (std::size_t i = 0; i < count; ++i) a[i] = b[i];
}

void stream_triad(float* a, const float* b, const float* c, float scalar, std::size_t count,
                  int threads) {
  const int used = host_thread_count(threads);
  (void)used;
#pragma omp parallel for simd schedule(static) num_threads(used)
  for (std::size_t i = 0; i < count; ++i) a[i] = b[i] + scalar * c[i];
}

}  // namespace zerolens::kernels
