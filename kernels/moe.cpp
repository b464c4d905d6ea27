#include "kernels/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zerolens::kernels {

MoeRoutes moe_route(const float* logits, std::size_t tokens, std::size_t experts, std::size_t top_k,
                    std::size_t capacity) {
  MoeRoutes r{.tokens = tokens, .top_k = top_k, .experts = experts, .capacity = capacity};
  r.expert.assign(tokens * top_k, -1);
  r.slot.assign(tokens * top_k, -1);
  r.gate.assign(tokens * top_k, 0.0f);
  r.probs.assign(tokens * experts, 0.0f);
  std::vector<std::size_t> filled(experts, 0), order(experts);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * experts;
    float* p = r.probs.data() + t * experts;
    const float peak = *std::max_element(row, row + experts);
    double sum = 0;
    for (std::size_t e = 0; e < experts; ++e) sum += p[e] = std::exp(row[e] - peak);
    for (std::size_t e = 0; e < experts; ++e) p[e] = float(p[e] / sum);
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
    // Slots in token order (the cumulative count of earlier tokens sent to the expert); the gates
    // are renormalised over the routes kept.
    double kept = 0;
    for (std::size_t j = 0; j < top_k; ++j) {
      const std::size_t e = order[j], at = t * top_k + j;
      r.expert[at] = std::int32_t(e);
      const std::size_t location = filled[e]++;
      if (location < capacity) {
        r.slot[at] = std::int32_t(location);
        kept += p[e];
      }
    }
    for (std::size_t j = 0; j < top_k; ++j) {
      const std::size_t at = t * top_k + j;
      if (r.slot[at] >= 0 && kept > 0) r.gate[at] = float(double(p[r.expert[at]]) / kept);
    }
  }
  return r;
}

namespace {

// The buffer row of route `at`, or nullptr when it was dropped.
template <typename T>
T* row_of(T* buffer, const MoeRoutes& r, std::size_t at, std::size_t channels) {
  if (r.slot[at] < 0) return nullptr;
  return buffer + (std::size_t(r.expert[at]) * r.capacity + std::size_t(r.slot[at])) * channels;
}

}  // namespace

void moe_dispatch(float* buffer, const float* inp, const MoeRoutes& r, std::size_t channels) {
  std::fill(buffer, buffer + r.experts * r.capacity * channels, 0.0f);
  for (std::size_t t = 0; t < r.tokens; ++t) {
    for (std::size_t j = 0; j < r.top_k; ++j) {
      float* row = row_of(buffer, r, t * r.top_k + j, channels);
      if (row) std::copy(inp + t * channels, inp + (t + 1) * channels, row);
    }
  }
}

void moe_combine(float* out, const float* buffer, const MoeRoutes& r, std::size_t channels) {
  std::fill(out, out + r.tokens * channels, 0.0f);
  for (std::size_t t = 0; t < r.tokens; ++t) {
    for (std::size_t j = 0; j < r.top_k; ++j) {
      const std::size_t at = t * r.top_k + j;
      const float* row = row_of(buffer, r, at, channels);
      if (!row) continue;
      for (std::size_t c = 0; c < channels; ++c) out[t * channels + c] += r.gate[at] * row[c];
    }
  }
}

void moe_combine_backward(float* dbuffer, float* dgate, const float* dout, const float* buffer,
                          const MoeRoutes& r, std::size_t channels) {
  for (std::size_t t = 0; t < r.tokens; ++t) {
    const float* d = dout + t * channels;
    for (std::size_t j = 0; j < r.top_k; ++j) {
      const std::size_t at = t * r.top_k + j;
      const float* row = row_of(buffer, r, at, channels);
      if (!row) continue;
      float* drow = row_of(dbuffer, r, at, channels);
      double dot = 0;
      for (std::size_t c = 0; c < channels; ++c) {
        drow[c] += r.gate[at] * d[c];
        dot += double(d[c]) * double(row[c]);
      }
      dgate[at] += float(dot);
    }
  }
}

void moe_dispatch_backward(float* dinp, const float* dbuffer, const MoeRoutes& r,
                           std::size_t channels) {
  for (std::size_t t = 0; t < r.tokens; ++t) {
    for (std::size_t j = 0; j < r.top_k; ++j) {
      const float* drow = row_of(dbuffer, r, t * r.top_k + j, channels);
      if (!drow) continue;
      for (std::size_t c = 0; c < channels; ++c) dinp[t * channels + c] += drow[c];
    }
  }
}

// g_j = p_j / Z over the kept routes, Z their sum: dp_j = (dg_j - sum_i dg_i g_i) / Z; then the
// softmax: dlogit_e = p_e (dp_e - sum_f p_f dp_f).
void moe_route_backward(float* dlogits, const float* dgate, const MoeRoutes& r) {
  std::vector<double> dp(r.experts);
  for (std::size_t t = 0; t < r.tokens; ++t) {
    const float* p = r.probs.data() + t * r.experts;
    std::fill(dp.begin(), dp.end(), 0.0);
    double kept = 0, weighted = 0;
    for (std::size_t j = 0; j < r.top_k; ++j) {
      const std::size_t at = t * r.top_k + j;
      if (r.slot[at] < 0) continue;
      kept += p[r.expert[at]];
      weighted += double(dgate[at]) * double(r.gate[at]);
    }
    if (kept <= 0) continue;
    for (std::size_t j = 0; j < r.top_k; ++j) {
      const std::size_t at = t * r.top_k + j;
      if (r.slot[at] >= 0) dp[std::size_t(r.expert[at])] = (double(dgate[at]) - weighted) / kept;
    }
    double mean = 0;
    for (std::size_t e = 0; e < r.experts; ++e) mean += double(p[e]) * dp[e];
    for (std::size_t e = 0; e < r.experts; ++e)
      dlogits[t * r.experts + e] += float(double(p[e]) * (dp[e] - mean));
  }
}

}  // namespace zerolens::kernels
