#pragma once
// Causal multi-head self-attention in float64, straight from the definition: the reference of the
// CPU kernel's tests (tests/kernels/test_attention.cpp) and of the CUDA kernel's
// (tests/kernels/cuda/test_attention.cpp).
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/attention.hpp"

namespace zerolens::kernels::testing {

struct AttentionReference {
  std::vector<double> out;     // [B, T, C]
  std::vector<double> scores;  // [B, NH, T, T], scaled q.k, 0 where masked
  std::vector<double> att;     // [B, NH, T, T], causal softmax, 0 where masked
};

// Causal self-attention in float64, written straight from the definition:
// att[b,h,t,s] = softmax_s<=t(q[b,t,h] . k[b,s,h] / sqrt(hs)); out[b,t,h] = sum_s att * v[b,s,h].
inline AttentionReference attention_reference(const std::vector<double>& qkv,
                                              const AttentionShape& shape) {
  const std::size_t B = shape.batch, T = shape.seq_len, C = shape.channels, NH = shape.heads,
                    hs = C / NH;
  AttentionReference result{std::vector<double>(B * T * C, 0.0),
                            std::vector<double>(B * NH * T * T, 0.0),
                            std::vector<double>(B * NH * T * T, 0.0)};
  const auto q = [&](std::size_t b, std::size_t t, std::size_t h, std::size_t i) {
    return qkv[(b * T + t) * 3 * C + h * hs + i];
  };
  const auto k = [&](std::size_t b, std::size_t t, std::size_t h, std::size_t i) {
    return qkv[(b * T + t) * 3 * C + C + h * hs + i];
  };
  const auto v = [&](std::size_t b, std::size_t t, std::size_t h, std::size_t i) {
    return qkv[(b * T + t) * 3 * C + 2 * C + h * hs + i];
  };
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h)
      for (std::size_t t = 0; t < T; ++t) {
        const std::size_t row = ((b * NH + h) * T + t) * T;
        double normalizer = 0.0;
        for (std::size_t s = 0; s <= t; ++s) {
          double score = 0.0;
          for (std::size_t i = 0; i < hs; ++i) score += q(b, t, h, i) * k(b, s, h, i);
          result.scores[row + s] = score / std::sqrt(double(hs));
          normalizer += std::exp(result.scores[row + s]);
        }
        for (std::size_t s = 0; s <= t; ++s)
          result.att[row + s] = std::exp(result.scores[row + s]) / normalizer;
        for (std::size_t i = 0; i < hs; ++i) {
          double sum = 0.0;
          for (std::size_t s = 0; s <= t; ++s) sum += result.att[row + s] * v(b, s, h, i);
          result.out[(b * T + t) * C + h * hs + i] = sum;
        }
      }
  return result;
}

}  // namespace zerolens::kernels::testing
