// forward_loop — the loop of ../shared/context/flux-issue-gpu-memory-growing.txt
// (a Flux model's forward pass whose device memory grows every iteration) with
// GC-owned device arrays, run under one collection policy. See usage() in
// forward_loop_lib.cpp for the flags; the model is described in
// forward_loop_lib.hpp.
//
//   forward_loop                              # pressure policy, a line per iteration
//   forward_loop --policy at_limit --host-heap-mib 1024 --quiet
//   forward_loop --policy explicit_free --json --quiet   # the oracle, as JSON
#include <cstdio>
#include <exception>

#include "forward_loop_lib.hpp"

int main(int argc, char** argv) {
  fwd::options o;
  try {
    bool help = false;
    o = fwd::parse_args(argc, argv, &help);
    if (help) {
      std::fputs(fwd::usage().c_str(), stdout);
      return 0;
    }
  } catch (const fwd::usage_error& e) {
    std::fprintf(stderr, "forward_loop: %s\n\n%s", e.what(), fwd::usage().c_str());
    return 2;
  }
  try {
    const fwd::result r = fwd::run(o, nullptr, stdout);
    if (!o.quiet) std::printf("\n%s\n", r.pool_status.c_str());
    std::fputs(fwd::summary_table(r).c_str(), stdout);
    if (!o.trace.empty()) std::printf("trace written to %s\n", o.trace.c_str());
    if (o.json) std::printf("%s\n", fwd::to_json(r).c_str());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "forward_loop: %s\n", e.what());
    return 1;
  }
}
