#include "kernels/matmul.hpp"

#include <cblas.h>

#include <climits>
#include <stdexcept>

namespace zerolens::kernels {

namespace {

// CBLAS takes int dimensions (OpenBLAS's blasint is at least int); refuse sizes that would wrap.
int blas_dimension(std::size_t size) {
  if (size > std::size_t(INT_MAX))
    throw std::length_error("matmul: dimension exceeds the CBLAS int range");
  return int(size);
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::size_t rows, std::size_t in_channels, std::size_t out_channels) {
  if (rows == 0 || out_channels == 0) return;
  // Seed `out` with the bias so one GEMM with beta = 1 adds the product onto it.
  float beta = 0.0f;
  if (bias != nullptr) {
    for (std::size_t row = 0; row < rows; ++row)
      for (std::size_t o = 0; o < out_channels; ++o) out[row * out_channels + o] = bias[o];
    beta = 1.0f;
  }
  const int m = blas_dimension(rows), n = blas_dimension(out_channels),
            k = blas_dimension(in_channels);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, inp, k, weight, k, beta, out,
              n);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::size_t rows, std::size_t in_channels,
                     std::size_t out_channels) {
  if (rows == 0 || out_channels == 0 || in_channels == 0) return;
  const int m = blas_dimension(rows), n = blas_dimension(out_channels),
            k = blas_dimension(in_channels);
  // dinp[rows, in] += dout[rows, out] · weight[out, in]
  if (dinp != nullptr)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1.0f, dout, n, weight, k, 1.0f,
                dinp, k);
  // dweight[out, in] += dout[rows, out]ᵀ · inp[rows, in]
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1.0f, dout, n, inp, k, 1.0f,
              dweight, k);
  if (dbias != nullptr) bias_backward(dbias, dout, rows, out_channels);
}

void bias_forward(float* out, const float* bias, std::size_t rows, std::size_t channels) {
  for (std::size_t row = 0; row < rows; ++row)
    for (std::size_t c = 0; c < channels; ++c) out[row * channels + c] += bias[c];
}

void bias_backward(float* dbias, const float* dout, std::size_t rows, std::size_t channels) {
  // Column sums of dout; rows in the inner loop keep each sum in a register (no races across c).
#pragma omp parallel for schedule(static) if (rows * channels > 65536)
  for (std::size_t c = 0; c < channels; ++c) {
    float sum = 0.0f;
    for (std::size_t row = 0; row < rows; ++row) sum += dout[row * channels + c];
    dbias[c] += sum;
  }
}

}  // namespace zerolens::kernels
