#pragma once
// The memory-bandwidth kernels of the STREAM benchmark (McCalpin) over float32, threaded with
// OpenMP like the optimizer (static schedule, same thread count), so a measured Adam rate can be
// set against the machine's bandwidth. STREAM counts bytes without write-allocate traffic:
// copy moves 2 x 4 bytes per element (read b, write a), triad 3 x 4 (read b and c, write a).
#include <cstddef>

namespace zerolens::kernels {

inline constexpr std::size_t kStreamCopyBytesPerElement = 2 * sizeof(float);
inline constexpr std::size_t kStreamTriadBytesPerElement = 3 * sizeof(float);

// The threads a kernel of this library runs with for `requested` (<= 0: the OpenMP default).
int host_thread_count(int requested);

// Sets the default thread count of this library's OpenMP loops and of the GEMMs' BLAS (OpenBLAS,
// where the build links it): ranks sharing a node's cores each run their share of them, not all.
void set_host_threads(int threads);

// a[i] = value. Run it with the thread count of the timed kernels so each thread first-touches
// the pages it later streams.
void stream_fill(float* a, float value, std::size_t count, int threads = 0);
// a[i] = b[i].
void stream_copy(float* a, const float* b, std::size_t count, int threads = 0);
// a[i] = b[i] + scalar * c[i].
void stream_triad(float* a, const float* b, const float* c, float scalar, std::size_t count,
                  int threads = 0);

}  // namespace zerolens::kernels
