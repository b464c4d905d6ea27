// The sweep's Pareto front (step time against memory headroom) and each layout's verdict.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iterator>
#include <limits>
#include <sstream>

#include "sim/predict/sweep.hpp"

namespace zerolens {
namespace {

std::string fixed(double value, int decimals) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(decimals) << value;
  return text.str();
}

// The point with its layout always named (the search compares layouts).
std::string with_layout(const SweepPoint& point) {
  if (point.layout.tensor > 1 || point.layout.pipeline > 1 || point.layout.expert > 1)
    return point.label();
  std::ostringstream text;  // (not operator+: GCC 12's -Wrestrict misfires on "[" + a + "] " + b)
  text << '[' << point.layout.label() << "] " << point.label();
  return text.str();
}

std::string time_and_headroom(const SweepResult& result) {
  return fixed(result.step_time * 1e3, 1) + " ms, headroom " + fixed(result.headroom * 100, 1) +
         " %";
}

// The device whose capacity the point overruns most, as a share of that capacity.
std::string closest_overrun(const SweepResult& result) {
  int worst = 0;
  double worst_share = 0;
  for (int d = 0; d < kDeviceCount; ++d) {
    const auto capacity = result.capacity[std::size_t(d)];
    if (capacity <= 0) continue;
    const double share = double(result.peak[std::size_t(d)]) / double(capacity);
    if (share > worst_share) worst = d, worst_share = share;
  }
  static constexpr const char* kDeviceNames[] = {"GPU", "CPU", "NVMe"};
  static_assert(std::size(kDeviceNames) == kDeviceCount);
  return "the closest, " + result.point.label() + ", needs " + fixed(worst_share * 100, 0) +
         " % of the " + kDeviceNames[worst] + "'s capacity";
}

std::string verdict_of(SweepFamily& family, const std::vector<SweepResult>& results) {
  family.fate = FamilyFate::Refused;
  if (family.evaluated == 0)
    return family.refusal.empty() ? "nothing evaluated" : "refused: " + family.refusal;
  const SweepResult* fastest = nullptr;  // results are fastest first
  const SweepResult* closest = nullptr;
  for (const auto& result : results) {
    if (!(result.point.layout == family.layout)) continue;
    if (result.fits && !fastest) fastest = &result;
    if (!closest || result.headroom > closest->headroom) closest = &result;
  }
  family.fate = FamilyFate::NothingFits;
  if (!fastest) return "nothing fits: " + closest_overrun(*closest);
  family.fate = family.on_front > 0 ? FamilyFate::OnFront : FamilyFate::Dominated;
  if (family.on_front > 0)
    return "on the front: " + std::to_string(family.on_front) + " point" +
           (family.on_front > 1 ? "s" : "") + ", the fastest " + time_and_headroom(*fastest);
  for (const auto& result : results)
    if (result.pareto && result.step_time <= fastest->step_time &&
        result.headroom >= fastest->headroom)
      return "dominated: its fastest (" + time_and_headroom(*fastest) + ") loses to " +
             with_layout(result.point) + " (" + time_and_headroom(result) + ")";
  return "dominated";
}

}  // namespace

void mark_pareto_front(std::vector<SweepResult>& results) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < results.size(); ++i) {
    results[i].pareto = false;
    if (results[i].fits) order.push_back(i);
  }
  // Fastest first, the most headroom first among equally fast ones: a point is on the front when it
  // has more headroom than every point at least as fast.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (results[a].step_time != results[b].step_time)
      return results[a].step_time < results[b].step_time;
    return results[a].headroom > results[b].headroom;
  });
  double best_headroom = -std::numeric_limits<double>::infinity();
  for (const auto i : order) {
    if (results[i].headroom <= best_headroom) continue;
    results[i].pareto = true;
    best_headroom = results[i].headroom;
  }
}

void judge_families(std::vector<SweepFamily>& families, const std::vector<SweepResult>& results) {
  for (auto& family : families) {
    if (!family.verdict.empty()) continue;  // refused as a layout
    family.on_front = std::count_if(results.begin(), results.end(), [&](const SweepResult& result) {
      return result.pareto && result.point.layout == family.layout;
    });
    family.verdict = verdict_of(family, results);
  }
}

}  // namespace zerolens
