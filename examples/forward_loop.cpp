// forward_loop — the loop of ../shared/context/flux-issue-gpu-memory-growing.txt
// (a Flux model's forward pass whose device memory grows every iteration) with
// GC-owned device arrays, run under one collection policy, or a matrix of
// policies x workloads in one process. The loop is the gcpressure_forward
// library (bench/forward/forward.hpp); see usage() in bench/forward/cli.cpp
// for the flags.
//
//   forward_loop                              # pressure policy, a line per iteration
//   forward_loop --policy at_limit --host-heap-mib 1024 --quiet
//   forward_loop --policy explicit_free --json --quiet   # the oracle, as JSON
//   forward_loop --policy all --workload all --reps 3 --json --quiet   # a JSON line per run
//   forward_loop --devices 2 --json --quiet   # a replica per device, one policy; per-device JSON
#include <cstdio>
#include <exception>
#include <memory>

#include "forward.hpp"

int main(int argc, char** argv) {
  fwd::options o;
  try {
    bool help = false;
    o = fwd::parse_args(argc, argv, &help);
    if (help) {
      std::fputs(fwd::usage().c_str(), stdout);
      return 0;
    }
    if (o.version) {
      std::printf("%s\n", fwd::version().c_str());
      return 0;
    }
  } catch (const fwd::usage_error& e) {
    std::fprintf(stderr, "forward_loop: %s\n\n%s", e.what(), fwd::usage().c_str());
    return 2;
  } catch (const fwd::environment_error& e) {
    std::fprintf(stderr, "forward_loop: %s\n", e.what());
    return 2;
  }
  try {
    const auto runs = fwd::expand(o);
    // One live host heap for every run of this process (building 1 GiB takes seconds).
    std::unique_ptr<fwd::host_heap> heap;
    if (o.host_heap_mib > 0) heap = std::make_unique<fwd::host_heap>(o.host_heap_mib);
    for (const auto& one : runs) {
      const fwd::result r = fwd::run(one, heap.get(), stdout);
      if (runs.size() == 1 && !o.quiet) std::printf("\n%s\n%s\n", fwd::status_heading(r).c_str(), r.pool_status.c_str());
      if (runs.size() == 1 || !o.json) std::fputs(fwd::summary_table(r).c_str(), stdout);
      if (!one.trace.empty() && (runs.size() == 1 || !o.json)) std::printf("trace written to %s\n", one.trace.c_str());
      if (o.json) std::printf("%s\n", fwd::to_json(r).c_str());
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "forward_loop: %s\n", e.what());
    return 1;
  }
}
