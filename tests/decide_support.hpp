// Shared by the decision model's tests (test_decide.cpp,
// test_exposed_price.cpp): a hand-made snapshot to vary rule by rule.
#pragma once

#include <cstddef>

#include "pressure_model.hpp"
#include "test_support.hpp"

namespace gcp_decide {

namespace d = gcpressure::detail;

constexpr double ms = 1e-3;

// A device at 8 GiB soft / 16 GiB hard with 1 GiB live, allocating 40 GiB/s,
// and a minor that costs 6 ms; no lag, nothing exposed yet, 10 s of wall.
inline d::pressure_snapshot base(d::pressure_event e) {
  d::pressure_snapshot s;
  s.event = e;
  s.dev.soft = 8192 * MiB;
  s.dev.hard = 16384 * MiB;
  s.dev.live = s.dev.reserved = s.dev.live_after = s.dev.floor = 1024 * MiB;
  s.dev.rate = 40.0 * (1u << 30);
  s.cost_known = true;
  s.pause = 6 * ms;
  s.wall = 10;
  return s;
}

inline double gib(std::size_t b) { return static_cast<double>(b) / (1u << 30); }

}  // namespace gcp_decide
