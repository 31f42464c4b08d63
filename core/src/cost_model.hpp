// The pressure policy's cost model (Note [Minor cost is fixed + per young
// byte]): internal to core/src, included by pressure_policy.cpp and its tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace gcpressure {

namespace detail {

// Note [Minor cost is fixed + per young byte]
// A minor collection costs a fixed part (roots, dirty pages, re-protecting
// the heap: O(heap) with mprotect dirty bits) plus a part that grows with
// the young objects it must mark and sweep. Least squares over the recent
// (young bytes, seconds) samples separates the two; treating the whole cost
// as fixed makes the young budget and the cost chase each other upwards.
// The first sample (the runtime's first mark of a freshly built heap) is
// skipped, later ones are clamped to 8x the running estimate.
class cost_model {
 public:
  void add(double young, double seconds) {
    if (++seen_ == 1) return;
    const double x = ema_ > 0 ? std::min(seconds, 8 * ema_) : seconds;
    ema_ = ema_ > 0 ? 0.75 * ema_ + 0.25 * x : x;
    if (samples_.size() == 16) samples_.erase(samples_.begin());
    samples_.emplace_back(young, x);
  }
  bool known() const noexcept { return !samples_.empty(); }
  double mean() const noexcept { return ema_; }
  // Fixed part a and per-byte part b of a collection's cost.
  void fit(double* a, double* b) const {
    *a = ema_;
    *b = 0;
    if (samples_.empty()) return;
    const double n = static_cast<double>(samples_.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0, ymin = samples_.front().second;
    for (const auto& [x, y] : samples_) {
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
      ymin = std::min(ymin, y);
    }
    const double den = n * sxx - sx * sx;
    if (samples_.size() < 3 || den <= 1e-9 * n * sxx) {
      *a = ymin;  // no spread in young sizes: call the cheapest one fixed
      return;
    }
    *b = std::max(0.0, (n * sxy - sx * sy) / den);
    *a = std::max(0.0, (sy - *b * sx) / n);
    if (*b == 0) *a = sy / n;
  }
  double predict(double young) const {
    double a, b;
    fit(&a, &b);
    return a + b * young;
  }

 private:
  std::vector<std::pair<double, double>> samples_;
  double ema_ = 0;
  std::uint64_t seen_ = 0;
};

}  // namespace detail

}  // namespace gcpressure
