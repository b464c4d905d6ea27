// Causal attention: per batch element, strided-batched GEMMs over the heads (a head's q, k, v are
// hs-wide column blocks of the qkv rows, leading dimension 3C) around a causal softmax kernel with
// one warp per score row. cuBLAS is column-major: a row-major [r, c] matrix with row stride ld is
// the column-major [c, r] one with the same ld.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned warps_per_block = 8;

// Row r = (b, h, t) of the scores: att = softmax over s <= t of preatt; preatt gets -inf and att 0
// above the diagonal (the GEMM computed those entries too).
__global__ void causal_softmax_kernel(float* preatt, float* att, std::size_t rows,
                                      std::size_t seq_len) {
  const std::size_t row = std::size_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  if (row >= rows) return;
  const unsigned lane = threadIdx.x % 32;
  const std::size_t t = row % seq_len;
  float* scores = preatt + row * seq_len;
  float* probs = att + row * seq_len;
  float maximum = -INFINITY;
  for (std::size_t s = lane; s <= t; s += 32) maximum = fmaxf(maximum, scores[s]);
  maximum = device::warp_max(maximum);
  float sum = 0.0f;
  for (std::size_t s = lane; s <= t; s += 32) sum += expf(scores[s] - maximum);
  const float inverse = 1.0f / device::warp_sum(sum);
  for (std::size_t s = lane; s < seq_len; s += 32) {
    if (s <= t) {
      probs[s] = expf(scores[s] - maximum) * inverse;
    } else {
      probs[s] = 0.0f;
      scores[s] = -INFINITY;
    }
  }
}

// In place: datt becomes the gradient of the raw scores q·k, scale * att * (datt - sum(att *
// datt)), 0 above the diagonal.
__global__ void causal_softmax_backward_kernel(float* dscores, const float* att, std::size_t rows,
                                               std::size_t seq_len, float scale) {
  const std::size_t row = std::size_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  if (row >= rows) return;
  const unsigned lane = threadIdx.x % 32;
  const std::size_t t = row % seq_len;
  float* d = dscores + row * seq_len;
  const float* a = att + row * seq_len;
  float sum = 0.0f;
  for (std::size_t s = lane; s <= t; s += 32) sum += a[s] * d[s];
  sum = device::warp_sum(sum);
  for (std::size_t s = lane; s < seq_len; s += 32)
    d[s] = s <= t ? scale * a[s] * (d[s] - sum) : 0.0f;
}

struct Dims {
  int T, C, NH, hs;
  long long qkv_batch, out_batch, score_batch;  // element strides between batch elements
};

Dims dims_of(const AttentionShape& shape) {
  if (shape.heads == 0 || shape.channels % shape.heads != 0)
    throw std::invalid_argument("attention: channels must be divisible by heads");
  const auto T = int(shape.seq_len), C = int(shape.channels), NH = int(shape.heads);
  return {T, C, NH, C / NH, 3LL * T * C, 1LL * T * C, 1LL * NH * T * T};
}

// One strided-batched GEMM over the NH heads of a batch element: head strides are hs for the
// activations and T*T for the scores.
void heads_gemm(cublasHandle_t blas, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n,
                int k, float alpha, const float* a, int lda, long long stride_a, const float* b,
                int ldb, long long stride_b, float beta, float* c, int ldc, long long stride_c,
                int heads, const char* what) {
  check_blas(cublasSgemmStridedBatched(blas, op_a, op_b, m, n, k, &alpha, a, lda, stride_a, b, ldb,
                                       stride_b, &beta, c, ldc, stride_c, heads),
             what);
}

unsigned row_blocks(std::size_t rows) {
  return unsigned((rows + warps_per_block - 1) / warps_per_block);
}

}  // namespace

void attention_forward(float* out, float* preatt, float* att, const float* inp,
                       const AttentionShape& shape, const BlasHandles& handles,
                       cudaStream_t stream) {
  const Dims d = dims_of(shape);
  if (shape.batch == 0 || d.T == 0) return;
  cublasHandle_t blas = handles.blas(stream);
  const float scale = 1.0f / std::sqrt(float(d.hs));
  const long long tt = 1LL * d.T * d.T;
  for (std::size_t b = 0; b < shape.batch; ++b) {
    const float* q = inp + b * d.qkv_batch;
    const float* k = q + d.C;
    float* scores = preatt + b * d.score_batch;
    // scores_cm[s, t] = scale * k[s]·q[t]: that is preatt[t, s] row-major.
    heads_gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, d.T, d.T, d.hs, scale, k, 3 * d.C, d.hs, q, 3 * d.C,
               d.hs, 0.0f, scores, d.T, tt, d.NH, "cublasSgemmStridedBatched q·k");
  }
  const std::size_t rows = shape.batch * shape.heads * shape.seq_len;
  causal_softmax_kernel<<<row_blocks(rows), 32 * warps_per_block, 0, stream>>>(preatt, att, rows,
                                                                               shape.seq_len);
  check_launch("causal_softmax_kernel");
  for (std::size_t b = 0; b < shape.batch; ++b) {
    const float* v = inp + b * d.qkv_batch + 2 * d.C;
    // out_cm[i, t] = sum_s v_cm[i, s] * att[t, s]: att row-major is att_cm transposed.
    heads_gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, d.hs, d.T, d.T, 1.0f, v, 3 * d.C, d.hs,
               att + b * d.score_batch, d.T, tt, 0.0f, out + b * d.out_batch, d.C, d.hs, d.NH,
               "cublasSgemmStridedBatched att·v");
  }
}

void attention_backward(float* dinp, float* dscores, const float* dout, const float* inp,
                        const float* att, const AttentionShape& shape, const BlasHandles& handles,
                        cudaStream_t stream) {
  const Dims d = dims_of(shape);
  if (shape.batch == 0 || d.T == 0) return;
  cublasHandle_t blas = handles.blas(stream);
  const long long tt = 1LL * d.T * d.T;
  const int ld = 3 * d.C;
  for (std::size_t b = 0; b < shape.batch; ++b) {
    const float* v = inp + b * d.qkv_batch + 2 * d.C;
    const float* dy = dout + b * d.out_batch;
    float* dv = dinp + b * d.qkv_batch + 2 * d.C;
    const float* a = att + b * d.score_batch;
    // datt[t, s] = dout[t]·v[s]  (into dscores, same layout as att)
    heads_gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, d.T, d.T, d.hs, 1.0f, v, ld, d.hs, dy, d.C, d.hs,
               0.0f, dscores + b * d.score_batch, d.T, tt, d.NH, "cublasSgemmStridedBatched datt");
    // dv[s] += sum_t att[t, s] dout[t]
    heads_gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, d.hs, d.T, d.T, 1.0f, dy, d.C, d.hs, a, d.T, tt,
               1.0f, dv, ld, d.hs, d.NH, "cublasSgemmStridedBatched dv");
  }
  const std::size_t rows = shape.batch * shape.heads * shape.seq_len;
  causal_softmax_backward_kernel<<<row_blocks(rows), 32 * warps_per_block, 0, stream>>>(
      dscores, att, rows, shape.seq_len, 1.0f / std::sqrt(float(d.hs)));
  check_launch("causal_softmax_backward_kernel");
  for (std::size_t b = 0; b < shape.batch; ++b) {
    const float* q = inp + b * d.qkv_batch;
    const float* k = q + d.C;
    float* dq = dinp + b * d.qkv_batch;
    float* dk = dq + d.C;
    const float* ds = dscores + b * d.score_batch;
    // dq[t] += sum_s dscores[t, s] k[s];  dk[s] += sum_t dscores[t, s] q[t]
    heads_gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, d.hs, d.T, d.T, 1.0f, k, ld, d.hs, ds, d.T, tt, 1.0f,
               dq, ld, d.hs, d.NH, "cublasSgemmStridedBatched dq");
    heads_gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, d.hs, d.T, d.T, 1.0f, q, ld, d.hs, ds, d.T, tt, 1.0f,
               dk, ld, d.hs, d.NH, "cublasSgemmStridedBatched dk");
  }
}

}  // namespace zerolens::kernels::cuda
