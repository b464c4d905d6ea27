#include "kernels/cuda/matmul.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

// cuBLAS is column-major: a row-major [r, c] matrix is the column-major [c, r] one. So the forward
// is out_cm[out, rows] = weight_cm[in, out]ᵀ · inp_cm[in, rows], with the bias along out.
struct LtDeleters {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using OpDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleters>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleters>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleters>;

Layout make_layout(cudaDataType type, std::size_t rows, std::size_t cols, std::size_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_blas(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, std::int64_t(ld)),
             "cublasLtMatrixLayoutCreate");
  return Layout(layout);
}

// Descriptors of one forward GEMM of a shape and data type.
struct ForwardGemm {
  OpDesc op;
  Layout a, b, d;
  Preference preference;

  ForwardGemm(cudaDataType type, std::size_t rows, std::size_t in, std::size_t out,
              const void* bias, const BlasHandles& handles) {
    cublasLtMatmulDesc_t desc = nullptr;
    check_blas(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate");
    op.reset(desc);
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose);
    set(CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep);
    // The bias is added in the GEMM's epilogue: no second pass over out.
    const cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    if (bias) {
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type);
    }
    a = make_layout(type, in, out, in);
    b = make_layout(type, in, rows, in);
    d = make_layout(type, out, rows, out);
    cublasLtMatmulPreference_t pref = nullptr;
    check_blas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    preference.reset(pref);
    const std::uint64_t workspace = handles.workspace_bytes();
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace, sizeof workspace),
               "cublasLtMatmulPreferenceSetAttribute");
  }

  void set(cublasLtMatmulDescAttributes_t attribute, const void* value, std::size_t size) {
    check_blas(cublasLtMatmulDescSetAttribute(op.get(), attribute, value, size),
               "cublasLtMatmulDescSetAttribute");
  }

  std::vector<cublasLtMatmulHeuristicResult_t> candidates(const BlasHandles& handles,
                                                          int requested) const {
    std::vector<cublasLtMatmulHeuristicResult_t> results(
        std::size_t(requested > 0 ? requested : 1));
    int returned = 0;
    check_blas(cublasLtMatmulAlgoGetHeuristic(handles.lt(), op.get(), a.get(), b.get(), d.get(),
                                              d.get(), preference.get(), int(results.size()),
                                              results.data(), &returned),
               "cublasLtMatmulAlgoGetHeuristic");
    results.resize(std::size_t(returned));
    return results;
  }

  void run(void* out, const void* inp, const void* weight, const BlasHandles& handles,
           cudaStream_t stream, int algorithm) const {
    const auto results = candidates(handles, algorithm + 1);
    if (algorithm < 0 || std::size_t(algorithm) >= results.size())
      throw std::out_of_range("matmul_forward: cuBLASLt offers " + std::to_string(results.size()) +
                              " algorithms, asked for #" + std::to_string(algorithm));
    const float one = 1.0f, zero = 0.0f;
    check_blas(cublasLtMatmul(handles.lt(), op.get(), &one, weight, a.get(), inp, b.get(), &zero,
                              out, d.get(), out, d.get(), &results[std::size_t(algorithm)].algo,
                              handles.workspace(), handles.workspace_bytes(), stream),
               "cublasLtMatmul");
  }
};

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::size_t rows, std::size_t in_channels, std::size_t out_channels,
                    const BlasHandles& handles, cudaStream_t stream, int algorithm) {
  if (rows == 0 || out_channels == 0) return;
  ForwardGemm(CUDA_R_32F, rows, in_channels, out_channels, bias, handles)
      .run(out, inp, weight, handles, stream, algorithm);
}

int matmul_forward_algorithms(std::size_t rows, std::size_t in_channels, std::size_t out_channels,
                              bool with_bias, const BlasHandles& handles, int requested) {
  // Any non-null pointer selects the bias epilogue; the heuristic never dereferences it.
  static const float placeholder = 0.0f;
  const void* bias = with_bias ? &placeholder : nullptr;
  return int(ForwardGemm(CUDA_R_32F, rows, in_channels, out_channels, bias, handles)
                 .candidates(handles, requested)
                 .size());
}

void matmul_forward_bf16(std::uint16_t* out, const std::uint16_t* inp, const std::uint16_t* weight,
                         const std::uint16_t* bias, std::size_t rows, std::size_t in_channels,
                         std::size_t out_channels, const BlasHandles& handles,
                         cudaStream_t stream) {
  if (rows == 0 || out_channels == 0) return;
  ForwardGemm(CUDA_R_16BF, rows, in_channels, out_channels, bias, handles)
      .run(out, inp, weight, handles, stream, 0);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::size_t rows, std::size_t in_channels,
                     std::size_t out_channels, const BlasHandles& handles, cudaStream_t stream) {
  if (rows == 0 || in_channels == 0 || out_channels == 0) return;
  cublasHandle_t blas = handles.blas(stream);
  const float one = 1.0f;
  const auto m = int(in_channels), n = int(rows), k = int(out_channels);
  // dinp_cm[in, rows] += weight_cm[in, out] · dout_cm[out, rows]
  if (dinp)
    check_blas(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, weight, m, dout, k, &one,
                           dinp, m),
               "cublasSgemm dinp");
  // dweight_cm[in, out] += inp_cm[in, rows] · dout_cm[out, rows]ᵀ
  check_blas(
      cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, m, k, n, &one, inp, m, dout, k, &one, dweight, m),
      "cublasSgemm dweight");
  if (dbias) column_sum_accumulate(dbias, dout, rows, out_channels, stream);
}

}  // namespace zerolens::kernels::cuda
