#include "kernels/layernorm.hpp"

#include <cmath>

namespace zerolens::kernels {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, std::size_t rows, std::size_t channels) {
  const double count = double(channels);
#pragma omp parallel for schedule(static) if (rows * channels > 65536)
  for (std::size_t row = 0; row < rows; ++row) {
    const float* x = inp + row * channels;
    // Row statistics in double: two passes, so the variance does not suffer cancellation.
    double sum = 0.0;
    for (std::size_t c = 0; c < channels; ++c) sum += x[c];
    const double row_mean = sum / count;
    double squares = 0.0;
    for (std::size_t c = 0; c < channels; ++c) squares += (x[c] - row_mean) * (x[c] - row_mean);
    const auto row_rstd = float(1.0 / std::sqrt(squares / count + double(layernorm_eps)));
    const auto mean_f = float(row_mean);
    float* y = out + row * channels;
    for (std::size_t c = 0; c < channels; ++c)
      y[c] = (x[c] - mean_f) * row_rstd * weight[c] + bias[c];
    mean[row] = mean_f;
    rstd[row] = row_rstd;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        std::size_t rows, std::size_t channels) {
  const auto count = float(channels);
  // Rows are serial because every row adds into the same dweight/dbias.
  for (std::size_t row = 0; row < rows; ++row) {
    const float* x = inp + row * channels;
    const float* dy = dout + row * channels;
    float* dx = dinp + row * channels;
    // With xhat = (x - mean) * rstd and g = dy * weight (the gradient w.r.t. xhat):
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    float g_sum = 0.0f, g_xhat_sum = 0.0f;
    for (std::size_t c = 0; c < channels; ++c) {
      const float xhat = (x[c] - mean[row]) * rstd[row];
      const float g = dy[c] * weight[c];
      g_sum += g;
      g_xhat_sum += g * xhat;
    }
    const float g_mean = g_sum / count, g_xhat_mean = g_xhat_sum / count;
    for (std::size_t c = 0; c < channels; ++c) {
      const float xhat = (x[c] - mean[row]) * rstd[row];
      dbias[c] += dy[c];
      dweight[c] += xhat * dy[c];
      dx[c] += rstd[row] * (dy[c] * weight[c] - g_mean - xhat * g_xhat_mean);
    }
  }
}

}  // namespace zerolens::kernels
