// report.cpp — a run's result as JSON (the benchmark contract), as a summary
// table, and as a per-iteration trace CSV.
//
// Note [What the JSON promises]
// Every count and time is a delta over the loop (not set-up or teardown).
// The "exact" list and the "bounds" object say which figures are exact and
// which are bounds, and why; summarize.py and the CI matrix rely on these
// keys. collections_full_steady keeps its name with a corrected meaning:
// blocking whole-heap collections of ANY origin after the first 10% of the
// iterations (equal to collections_full_steady_any), where it used to count
// only the policy's own.
#include <cmath>
#include <sstream>

#include "forward.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/json.hpp"
#include "gcpressure/stats.hpp"

namespace fwd {

namespace gcp = gcpressure;

namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A JSON object writer for one line: key/value pairs in order.
class json_line {
 public:
  json_line& key(const char* k) {
    os_ << (first_ ? "{" : ",") << '"' << k << "\":";
    first_ = false;
    return *this;
  }
  json_line& u(const char* k, std::uint64_t v) { return key(k).raw(std::to_string(v)); }
  json_line& d(const char* k, double v) { return key(k).raw(num(v)); }
  json_line& s(const char* k, const std::string& v) { return key(k).raw(gcp::json_quote(v)); }
  json_line& b(const char* k, bool v) { return key(k).raw(v ? "true" : "false"); }
  json_line& raw(const std::string& v) {
    os_ << v;
    return *this;
  }
  std::string done() { return os_.str() + "}"; }

 private:
  std::ostringstream os_;
  bool first_ = true;
};

std::string by_reason(const result& r) {
  json_line j;
  for (int i = 0; i < 5; ++i) j.u(gcp::to_string(static_cast<gcp::gc_reason>(i)), r.collections_by_reason[i]);
  return j.done();
}

std::string bounds(const result& r) {
  const std::string rt = r.runtime_seconds_exact ? "the runtime's own time (exact)"
                                                 : "the runtime's own time (a lower bound: its incremental work "
                                                   "inside its allocator is not timed)";
  json_line j;
  j.s("exposed_gc_seconds", "policy part measured where the backend times its events (the part after the device "
                            "went idle), else counted whole (exposed_gc_seconds_untimed; "
                            "collections with no device probe count whole) plus " + rt);
  j.s("exposed_gc_seconds_charged", "the probe's upper bound (a collection the device finished in counts whole) less "
                                    "what the device's lag is known to have hidden: what the policy's budget counts "
                                    "(pressure); may exceed a measured exposed_gc_seconds");
  j.s("hidden_gc_seconds", "measured where the backend times its events, else a lower bound (only collections "
                           "after which the device was still busy)");
  j.s("runtime_gc_seconds", rt);
  j.s("gc_seconds_all", "the policy's time (exact) plus " + rt);
  j.s("collections_full_steady_any", "an upper bound: the runtime's own whole-heap collections are counted as "
                                     "blocking (Boehm's stop the world); the policy's parts are exact");
  return j.done();
}

// One object per device (Note [Figures over several devices], forward.hpp).
std::string devices(const result& r) {
  std::string out = "[";
  for (const device_result& d : r.devices) {
    json_line j;
    j.u("device", static_cast<std::uint64_t>(d.device));
    j.u("peak_live_bytes", d.peak_live_bytes).u("peak_reserved_bytes", d.peak_reserved_bytes);
    j.u("final_live_bytes", d.final_live_bytes).u("reclaimed_bytes", d.reclaimed_bytes);
    j.u("finalized", d.finalized).u("allocations", d.allocations).u("ooms", d.ooms);
    j.u("hard_limit", d.hard_limit).u("soft_limit", d.soft_limit).u("device_total", d.device_total);
    if (out.size() > 1) out += ',';
    out += j.done();
  }
  return out + "]";
}

const char* const exact_keys =
    "[\"collections_minor\",\"collections_full\",\"collections_incremental_full\",\"collections_blocking_full\","
    "\"blocking_cycles\",\"collections_runtime\",\"runtime_full_collections\",\"collector_collections\","
    "\"gc_seconds\",\"peak_live_bytes\",\"peak_reserved_bytes\",\"wall_seconds\",\"time_per_iter\","
    "\"host_seconds_per_iter\",\"sync_seconds\",\"ooms\"]";

// Note [Exposed time over the budget]
// --gc-budget paces the pressure policy's collections at syncs and its
// whole-heap cycles; collections at an allocation run when the young bytes
// reach the footprint bound or the headroom, before the budget is asked, and
// the reclaim ladder runs whatever the budget says. The runtime's own
// collections and the upper bound of exposed time add to the figure too. The
// summary names the parts that apply to the run.
std::string over_budget(const result& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "exposed %.2f%% > budget %.2f%%: ", 100 * r.exposed_gc_fraction, 100 * r.gc_budget);
  std::string out = buf;
  if (r.policy != "pressure") return out + "only the pressure policy keeps to --gc-budget; " + r.policy +
                                     " collects by its own rule";
  const std::uint64_t total = r.collections_minor + r.collections_full;
  const std::uint64_t early = r.collections_by_reason[static_cast<int>(gcp::gc_reason::early)];
  const std::uint64_t ladder = r.collections_by_reason[static_cast<int>(gcp::gc_reason::ladder)];
  if (early > 0) {
    std::snprintf(buf, sizeof buf, "%llu of %llu collections ran at allocations, where the footprint bound comes first; ",
                  static_cast<unsigned long long>(early), static_cast<unsigned long long>(total));
    out += buf;
  }
  if (ladder > 0) out += std::to_string(ladder) + " in the reclaim ladder (an allocation would have failed); ";
  if (r.runtime_gc_seconds > 0) {
    std::snprintf(buf, sizeof buf, "the runtime's own collections %.3f s; ", r.runtime_gc_seconds);
    out += buf;
  }
  return out + "exposed is an upper bound (a slice during which the device finished counts whole)";
}

}  // namespace

std::string summary_glossary() {
  return "Summary lines (forward_loop's last block; every figure covers the loop, not set-up or teardown):\n"
         "  policy / workload / backend   what ran (the backend after auto is resolved)\n"
         "  model                         device bytes kept alive (weights, input) and allocated per iteration\n"
         "  host heap                     the live host GC heap (--host-heap-mib) and small garbage per iteration\n"
         "  limits                        the hard and soft limits in force, and the (simulated) device's size\n"
         "  iterations                    iterations run (--max-seconds may stop the loop early)\n"
         "  time per iteration            loop wall time / iterations; host: an iteration's host time before its\n"
         "                                sync; CPU: the process's CPU time over the loop (all threads)\n"
         "  sync: calls / time / waited   synchronize hints, the time inside them (collections included) and the\n"
         "                                time blocked on the device; slack: the wait the policy expects to fill\n"
         "  peak live / reserved          device bytes in use (requested) and held from the device (in use + the\n"
         "                                pool's cache), at their peaks; explicit_free's peaks are the oracle\n"
         "  policy minor / full           collections the policy asked the collector for; full: whole-heap cycles,\n"
         "                                in slices (incremental) or at once (blocking); cycles run back to back:\n"
         "                                sliced cycles finished at once because memory was needed\n"
         "  runtime's own                 collections the runtime (Boehm) started by itself; collector total:\n"
         "                                every collection the collector completed, the policy's and its own\n"
         "  blocking whole-heap after 10% stop-the-world whole-heap collections of any origin after the first\n"
         "                                10% of the iterations (the runtime's own counted as blocking)\n"
         "  GC time exposed / hidden      exposed: collection time the loop waited for (an upper bound, the\n"
         "                                runtime's own time included), also as a share of wall time; hidden:\n"
         "                                collection time that overlapped device work\n"
         "  why over the GC budget        when exposed exceeds --gc-budget: which collections the budget does\n"
         "                                not pace (Note [Exposed time over the budget], bench/forward/report.cpp)\n"
         "  GC time policy / all          the policy's collections; all: plus the runtime's own (a lower bound)\n"
         "  longest pause / iteration     the longest collection the policy ran; the longest iteration\n"
         "  finalized handles             device arrays the collector found dead and whose finalizers ran\n"
         "  OOMs                          out-of-memory errors the loop caught\n";
}

std::string version() {
  std::string v = std::string("forward_loop, gcpressure ") + FWD_GCPRESSURE_VERSION + "; backends: host";
#if FWD_WITH_CUDA
  v += ", cuda, cuda_async (built with CUDA; ";
  v += gcp::cuda_available() ? std::to_string(gcp::cuda_device_count()) + " usable device(s))" : "no usable device here)";
#else
  v += " (built without CUDA)";
#endif
  return v;
}

std::string status_heading(const result& r) {
  std::ostringstream os;
  os << "The library's statistics (gcpressure::to_text), since the device heap was created: peaks from the loop's "
        "start; counts and totals include the set-up's "
     << r.collections_before_loop << " collection(s) and " << r.allocations_before_loop
     << " allocation(s), which the summary below leaves out.";
  return os.str();
}

std::string to_json(const result& r) {
  json_line j;
  j.s("policy", r.policy).s("backend", r.backend).s("workload", r.workload);
  j.u("iterations", r.iterations).u("iterations_requested", r.iterations_requested);
  j.b("stopped_early", r.stopped_early).u("ooms", r.ooms);
  j.u("peak_live_bytes", r.peak_live_bytes).u("peak_reserved_bytes", r.peak_reserved_bytes);
  j.u("peak_reserved_iteration", static_cast<std::size_t>(r.peak_reserved_iteration));
  j.u("final_live_bytes", r.final_live_bytes).u("final_reserved_bytes", r.final_reserved_bytes);
  j.u("collections_minor", r.collections_minor).u("collections_full", r.collections_full);
  j.u("collections_incremental_full", r.collections_incremental_full);
  j.u("collections_blocking_full", r.collections_blocking_full).u("blocking_cycles", r.blocking_cycles);
  j.u("collections_full_steady", r.collections_full_steady);
  j.u("collections_full_steady_any", r.collections_full_steady_any);
  j.key("collections_by_reason").raw(by_reason(r));
  j.u("incremental_slices", r.incremental_slices).u("ladder_full_collections", r.ladder_full_collections);
  j.d("max_pause_seconds", r.max_pause_seconds).d("max_iteration_seconds", r.max_iteration_seconds);
  j.d("gc_seconds", r.gc_seconds).d("gc_fraction", r.gc_fraction);
  j.d("exposed_gc_seconds", r.exposed_gc_seconds).d("exposed_gc_fraction", r.exposed_gc_fraction);
  j.d("exposed_gc_seconds_untimed", r.exposed_gc_seconds_untimed);
  j.d("exposed_gc_seconds_charged", r.exposed_gc_seconds_charged)
      .d("exposed_gc_fraction_charged", r.exposed_gc_fraction_charged);
  j.d("hidden_gc_seconds", r.hidden_gc_seconds).d("gc_seconds_all", r.gc_seconds_all);
  j.d("wall_seconds", r.wall_seconds).d("time_per_iter", r.time_per_iter).d("cpu_seconds", r.cpu_seconds);
  j.d("host_seconds_per_iter", r.host_seconds_per_iter).d("sync_seconds", r.sync_seconds);
  j.d("sync_wait_seconds", r.sync_wait_seconds).d("slack_seconds", r.slack_seconds).u("syncs", r.syncs);
  j.b("hint_before_sync", r.hint_before_sync);
  j.u("sync_every", static_cast<std::uint64_t>(r.sync_every));
  j.s("array_objects", r.global_array_objects ? "global" : "thread-local");
  j.u("finalized", r.finalized).u("allocations", r.allocations);
  j.u("collections_runtime", r.collections_runtime);
  j.u("runtime_collections", r.collector_collections);  // its old meaning: every collection, the runtime's included
  j.u("runtime_full_collections", r.runtime_full_collections);
  j.u("runtime_full_collections_steady", r.runtime_full_collections_steady);
  j.u("collector_collections", r.collector_collections);
  j.d("runtime_gc_seconds", r.runtime_gc_seconds).b("runtime_seconds_exact", r.runtime_seconds_exact);
  j.u("runtime_heap_bytes", r.runtime_heap_bytes);
  j.u("host_heap_mib", r.host_heap_mib).u("host_heap_bytes", r.host_heap_bytes).u("host_allocs", r.host_allocs);
  j.u("layers", r.layers).u("d", r.d).u("batch", r.batch);
  j.u("bytes_per_iteration", r.bytes_per_iteration).u("model_bytes", r.model_bytes);
  j.u("hard_limit", r.hard_limit).u("soft_limit", r.soft_limit).u("device_total", r.device_total);
  j.d("gc_budget", r.gc_budget).u("live_at_exit_bytes", r.live_at_exit_bytes).d("checksum", r.checksum);
  j.u("headroom_changes", r.headroom_changes).u("available_bytes_min", r.available_bytes_min);
  {
    std::string its = "[";
    for (const int it : r.headroom_change_iterations) {
      if (its.size() > 1) its += ',';
      its += std::to_string(it);
    }
    j.key("headroom_change_iterations").raw(its + "]");
  }
  j.key("first_oom").raw(r.first_oom.empty() ? std::string("null") : gcp::json_quote(r.first_oom));
  j.key("first_oom_iteration").raw(r.first_oom_iteration < 0 ? std::string("null") : std::to_string(r.first_oom_iteration));
  j.u("device_count", static_cast<std::uint64_t>(r.device_count)).key("devices").raw(devices(r));
  j.key("exact").raw(exact_keys);
  j.key("bounds").raw(bounds(r));
  return j.done();
}

std::string summary_table(const result& r) {
  std::ostringstream os;
  char buf[256];
  auto row = [&](const char* k, const std::string& v) {
    std::snprintf(buf, sizeof buf, "  %-30s %s\n", k, v.c_str());
    os << buf;
  };
  auto f = [&](const char* fmt, double v) {
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  auto n = [](std::uint64_t v) { return std::to_string(v); };
  os << "forward_loop summary\n";
  row("policy / workload / backend", r.policy + " / " + r.workload + " / " + r.backend);
  row("model", n(r.layers) + " layers, d=" + n(r.d) + ", batch=" + n(r.batch) + " (" +
                   gcp::format_bytes(r.model_bytes) + " kept alive, " + gcp::format_bytes(r.bytes_per_iteration) +
                   " allocated per iteration" +
                   (r.device_count > 1 ? ", over " + n(static_cast<std::uint64_t>(r.device_count)) + " devices)" : ")"));
  row("host heap", n(r.host_heap_mib) + " MiB live (" + gcp::format_bytes(r.host_heap_bytes) + "), " +
                       n(r.host_allocs) + " small allocations per iteration");
  row("limits", "hard " + gcp::format_bytes(r.hard_limit) + ", soft " + gcp::format_bytes(r.soft_limit) +
                    " (device " + gcp::format_bytes(r.device_total) + ")");
  row("iterations", n(r.iterations) + (r.stopped_early ? " (stopped early by --max-seconds or --stop-file, of " +
                                                             n(r.iterations_requested) + ")"
                                                       : std::string()));
  row("time per iteration", f("%.3f ms", r.time_per_iter * 1e3) + f(" (host %.3f ms", r.host_seconds_per_iter * 1e3) +
                                f(", wall %.2f s", r.wall_seconds) + f(", CPU %.2f s)", r.cpu_seconds));
  row("sync: calls / time / waited", n(r.syncs) + f(" / %.3f s", r.sync_seconds) + f(" / %.3f s", r.sync_wait_seconds) +
                                         f(" (slack %.3f ms)", r.slack_seconds * 1e3));
  row("peak live / reserved", gcp::format_bytes(r.peak_live_bytes) + " / " + gcp::format_bytes(r.peak_reserved_bytes));
  row("policy minor / full", n(r.collections_minor) + " / " + n(r.collections_full) + " (" +
                                 n(r.collections_incremental_full) + " incremental, " +
                                 n(r.collections_blocking_full) + " blocking, " + n(r.blocking_cycles) +
                                 " cycles run back to back)");
  row("runtime's own", n(r.collections_runtime) + " collections (" + n(r.runtime_full_collections) +
                           " whole-heap); collector total " + n(r.collector_collections));
  row("blocking whole-heap after 10%", n(r.collections_full_steady_any) + " (any origin)");
  row("GC time exposed / hidden", f("%.3f s", r.exposed_gc_seconds) + f(" (%.2f%% of wall)", 100 * r.exposed_gc_fraction) +
                                      f(" / %.3f s", r.hidden_gc_seconds));
  if (r.exposed_gc_fraction > r.gc_budget) row("why over the GC budget", over_budget(r));
  row("GC time policy / all", f("%.3f s", r.gc_seconds) + f(" / %.3f s", r.gc_seconds_all));
  row("longest pause / iteration", f("%.3f ms", r.max_pause_seconds * 1e3) + f(" / %.3f ms", r.max_iteration_seconds * 1e3));
  row("finalized handles", n(r.finalized));
  row("OOMs", n(r.ooms));
  if (r.devices.size() > 1) {
    os << "  devices (top-level peaks: the most-pressed device; other figures: totals)\n";
    for (const device_result& d : r.devices)
      row(("device " + n(static_cast<std::uint64_t>(d.device))).c_str(),
          "peak live / reserved " + gcp::format_bytes(d.peak_live_bytes) + " / " +
              gcp::format_bytes(d.peak_reserved_bytes) + ", final live " + gcp::format_bytes(d.final_live_bytes) +
              ", reclaimed " + gcp::format_bytes(d.reclaimed_bytes) + ", finalized " + n(d.finalized) + ", " +
              n(d.allocations) + " allocations, " + n(d.ooms) + " OOMs (hard " + gcp::format_bytes(d.hard_limit) +
              ", soft " + gcp::format_bytes(d.soft_limit) + ")");
  }
  if (!r.headroom_change_iterations.empty())
    row("headroom changes (others)", n(r.headroom_changes) + ", first after iteration " +
                                         n(static_cast<std::uint64_t>(r.headroom_change_iterations.front())) +
                                         "; least available " + gcp::format_bytes(r.available_bytes_min));
  return os.str();
}

void write_trace(const result& r, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) GCPRESSURE_FAIL("forward_loop: cannot write the trace file '" + path + "'");
  std::fprintf(f, "iteration,live,reserved,collections,gc_seconds,exposed_gc_seconds,hidden_gc_seconds\n");
  for (const auto& s : r.samples)
    std::fprintf(f, "%d,%zu,%zu,%llu,%.9f,%.9f,%.9f\n", s.iteration, s.live, s.reserved,
                 static_cast<unsigned long long>(s.collections), s.gc_seconds, s.exposed_gc_seconds,
                 s.hidden_gc_seconds);
  std::fclose(f);
}

}  // namespace fwd
