// gcpressure_hog — another tenant: a process that takes a share of the device
// mid-run and holds it (issue 14, "Other tenants"). Allocates through
// device_allocator with the pool off, so it makes no CUDA call of its own and
// runs on every backend, the host one sharing a capacity file included.
//
//   gcpressure_hog [--backend host|cuda|cuda_async] [--fraction F] [--after-seconds S]
//                  [--hold-seconds H] [--hold-until-file FILE] [--host-shared FILE]
//                  [--host-capacity SIZE]
//
// Waits S seconds, then takes F of the device's total memory in chunks (a
// chunk that does not fit is retried every 10 ms: the other tenant may be
// giving memory back), prints one line when it holds it all, holds it H
// seconds from then (with --hold-until-file: until FILE exists, H seconds at
// most: a test's event, not a race) and frees it. The last line is JSON: target_bytes,
// taken_bytes, took_seconds (from start to holding it all), complete. Exit 0
// when it took everything, 3 when it gave up (H seconds after S without all of
// it), 2 on a usage error. GCPRESSURE_HOST_SHARED and _HOST_CAPACITY apply as
// for every gcpressure program; the limits never do (a hog takes what it is
// told to).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"

namespace gcp = gcpressure;

namespace {

using clock_type = std::chrono::steady_clock;

struct hog_options {
  gcp::allocator_options alloc;
  double fraction = 0.5, after = 0, hold = 10;
  std::string hold_until_file;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gcpressure_hog: %s\nusage: gcpressure_hog [--backend host|cuda|cuda_async] [--fraction F] "
               "[--after-seconds S] [--hold-seconds H] [--hold-until-file FILE] [--host-shared FILE] "
               "[--host-capacity SIZE]\n",
               why.c_str());
  std::exit(2);
}

double number(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo && x <= hi))
    usage(flag + ": expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return x;
}

hog_options parse(int argc, char** argv) {
  hog_options o;
  o.alloc = gcp::allocator_options::from_config(gcp::config_from_env());
  o.alloc.hard_limit = o.alloc.soft_limit = gcp::size_spec{};
  o.alloc.pool = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(a + ": unknown flag or missing value");
    const std::string v = argv[++i];
    if (a == "--backend") {
      const auto b = gcp::parse_backend(v, "--backend");
      if (b == gcp::backend_choice::automatic) usage("--backend: name the backend (host, cuda or cuda_async)");
      o.alloc.backend = b == gcp::backend_choice::host ? gcp::backend_kind::host
                        : b == gcp::backend_choice::cuda ? gcp::backend_kind::cuda
                                                          : gcp::backend_kind::cuda_async;
    } else if (a == "--fraction") o.fraction = number(a, v, 1e-6, 1);
    else if (a == "--after-seconds") o.after = number(a, v, 0, 1e6);
    else if (a == "--hold-seconds") o.hold = number(a, v, 0, 1e6);
    else if (a == "--hold-until-file") o.hold_until_file = v;
    else if (a == "--host-shared") o.alloc.host_shared = v;
    else if (a == "--host-capacity") {
      const auto s = gcp::parse_size(v, "--host-capacity");
      if (s.percent >= 0) usage("--host-capacity: must be bytes, not a percentage");
      o.alloc.host_capacity = s.bytes;
    } else usage("unknown flag '" + a + "'");
  }
  return o;
}

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

int run(const hog_options& o) {
  const auto t0 = clock_type::now();
  gcp::device_allocator a(o.alloc);
  const std::size_t target = static_cast<std::size_t>(o.fraction * static_cast<double>(a.device_memory().total));
  const std::size_t chunk = std::max<std::size_t>(gcp::alignment, gcp::round_up(std::min<std::size_t>(target / 16 + 1, std::size_t{1} << 30), gcp::alignment));
  std::this_thread::sleep_for(std::chrono::duration<double>(o.after));
  std::vector<std::pair<void*, std::size_t>> held;
  std::size_t taken = 0;
  const auto give_up = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.hold));
  while (taken < target && clock_type::now() < give_up) {
    const std::size_t n = std::min(chunk, target - taken);
    try {
      held.emplace_back(a.allocate(n), n);
      taken += n;
    } catch (const gcp::out_of_memory&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const double took = since(t0);
  const bool complete = taken >= target;
  if (complete) {
    std::printf("hog: holding %s (%.0f%% of the device) after %.3f s\n", gcp::format_bytes(taken).c_str(),
                100 * o.fraction, took);
    std::fflush(stdout);
    const auto until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                std::chrono::duration<double>(o.hold));
    if (o.hold_until_file.empty()) {
      std::this_thread::sleep_until(until);
    } else {
      while (::access(o.hold_until_file.c_str(), F_OK) != 0 && clock_type::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  for (const auto& [p, n] : held) a.free(p, n);
  std::printf("{\"target_bytes\":%zu,\"taken_bytes\":%zu,\"took_seconds\":%.6f,\"complete\":%s}\n", target, taken,
              took, complete ? "true" : "false");
  return complete ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const gcp::logic_error& e) {
    std::fprintf(stderr, "gcpressure_hog: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gcpressure_hog: %s\n", e.what());
    return 1;
  }
}
