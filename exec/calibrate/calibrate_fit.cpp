// The fits calibrate makes of its measurements: non-negative least squares in relative errors,
// and a group's collectives as latency + ring traffic / bandwidth.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "exec/calibrate/calibrate.hpp"
#include "sim/schedule/comm.hpp"

namespace zerolens::exec {
namespace {

// ---- least squares ------------------------------------------------------------------------------

// Solves the square system a x = b (Gaussian elimination with partial pivoting); false when
// singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& x) {
  const std::size_t n = b.size();
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t pivot = i;
    for (std::size_t r = i + 1; r < n; ++r) {
      if (std::abs(a[r][i]) > std::abs(a[pivot][i])) pivot = r;
    }
    if (!(std::abs(a[pivot][i]) > 0)) return false;
    std::swap(a[i], a[pivot]);
    std::swap(b[i], b[pivot]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == i) continue;
      const double f = a[r][i] / a[i][i];
      for (std::size_t c = i; c < n; ++c) a[r][c] -= f * a[i][c];
      b[r] -= f * b[i];
    }
  }
  x.resize(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = b[i] / a[i][i];
  return true;
}

}  // namespace

std::vector<double> fit_nonnegative(const std::vector<std::vector<double>>& features,
                                    const std::vector<double>& seconds) {
  const std::size_t k = features.empty() ? 0 : features.front().size();
  std::vector<double> best(k, 0);
  double best_error = std::numeric_limits<double>::infinity();
  // Every non-empty subset of the features, unconstrained on it; the best fit with no negative
  // coefficient wins (k is at most 3: seven subsets).
  for (unsigned subset = 1; subset < (1u << k); ++subset) {
    std::vector<std::size_t> used;
    for (std::size_t j = 0; j < k; ++j) {
      if (subset & (1u << j)) used.push_back(j);
    }
    std::vector<std::vector<double>> a(used.size(), std::vector<double>(used.size(), 0));
    std::vector<double> b(used.size(), 0);
    for (std::size_t i = 0; i < seconds.size(); ++i) {
      const double weight = 1 / (seconds[i] * seconds[i]);  // relative errors
      for (std::size_t p = 0; p < used.size(); ++p) {
        b[p] += weight * features[i][used[p]] * seconds[i];
        for (std::size_t q = 0; q < used.size(); ++q)
          a[p][q] += weight * features[i][used[p]] * features[i][used[q]];
      }
    }
    std::vector<double> x;
    if (!solve(a, b, x)) continue;
    if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
    std::vector<double> coefficients(k, 0);
    for (std::size_t p = 0; p < used.size(); ++p) coefficients[used[p]] = x[p];
    double error = 0;
    for (std::size_t i = 0; i < seconds.size(); ++i) {
      double predicted = 0;
      for (std::size_t j = 0; j < k; ++j) predicted += coefficients[j] * features[i][j];
      error += std::pow((predicted - seconds[i]) / seconds[i], 2);
    }
    if (error < best_error) {
      best_error = error;
      best = coefficients;
    }
  }
  return best;
}

GroupCollectives fit_group_collectives(int ranks, const std::vector<CollectiveRate>& rates) {
  // t = latency + traffic / bandwidth over every kind and size, in relative errors.
  std::vector<std::vector<double>> features;
  std::vector<double> seconds;
  for (const CollectiveRate& rate : rates) {
    const LinkTraffic traffic = collective_traffic(rate.kind, rate.bytes, GroupShape{ranks, 1});
    features.push_back({1.0, double(traffic.intra_node + traffic.inter_node)});
    seconds.push_back(rate.seconds);
  }
  const std::vector<double> fit = fit_nonnegative(features, seconds);
  double bandwidth = fit.size() == 2 && fit[1] > 0 ? 1 / fit[1] : 0;
  if (!(bandwidth > 0)) {  // all latency: take the largest message's bus bandwidth
    for (const CollectiveRate& rate : rates) bandwidth = std::max(bandwidth, rate.busbw);
  }
  return {ranks, fit.empty() ? 0 : fit[0], bandwidth};
}

RequestCost fit_request_cost(const std::vector<double>& requests, const std::vector<double>& bytes,
                             const std::vector<double>& seconds) {
  std::vector<std::vector<double>> features;
  std::vector<double> beyond;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    // A measurement that took no time beyond its bytes has no relative error to weigh.
    if (!(requests[i] > 0) || !(seconds[i] > 0)) continue;
    features.push_back({requests[i], bytes[i]});
    beyond.push_back(seconds[i]);
  }
  if (beyond.empty()) return {};
  // Requests of one size alone cannot part the two costs: all of it per request.
  const auto size_of = [](const std::vector<double>& f) { return f[1] / f[0]; };
  const bool one_size = std::all_of(features.begin(), features.end(), [&](const auto& f) {
    return std::abs(size_of(f) - size_of(features.front())) <= 1e-9 * size_of(features.front());
  });
  if (one_size) {
    double seconds_sum = 0, requests_sum = 0;
    for (std::size_t i = 0; i < beyond.size(); ++i) {
      seconds_sum += beyond[i];
      requests_sum += features[i][0];
    }
    return {seconds_sum / requests_sum, 0};
  }
  const std::vector<double> fit = fit_nonnegative(features, beyond);
  return {fit[0], fit[1]};
}

CalibrateLayerShape smallest_shape(const CalibrateOptions& options) {
  const auto smaller = [](const CalibrateLayerShape& a, const CalibrateLayerShape& b) {
    return a.hidden < b.hidden;
  };
  const auto& shapes = options.layer_shapes;
  return shapes.empty() ? options.engine_shape
                        : *std::min_element(shapes.begin(), shapes.end(), smaller);
}

}  // namespace zerolens::exec
