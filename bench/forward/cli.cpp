// cli.cpp — forward_loop's command line: usage text, flags over the
// GCPRESSURE_* environment, and the expansion of a matrix of runs.
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "detail.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

namespace fwd {

namespace gcp = gcpressure;

bool detail::in_list(const char* const* names, const std::string& s) {
  for (const char* const* n = names; *n; ++n)
    if (s == *n) return true;
  return false;
}

namespace {

using detail::in_list;

std::string joined(const char* const* names, const char* sep) {
  std::string out;
  for (const char* const* n = names; *n; ++n) out += (out.empty() ? "" : sep) + std::string(*n);
  return out;
}

// "a,b" or "all" (every name of `all`).
std::vector<std::string> split(const std::string& list, const char* const* all) {
  std::vector<std::string> out;
  if (list == "all") {
    for (const char* const* n = all; *n; ++n) out.emplace_back(*n);
    return out;
  }
  std::istringstream in(list);
  for (std::string w; std::getline(in, w, ',');) out.push_back(w);
  return out;
}

}  // namespace

std::string trace_name(const std::string& pattern, const std::string& policy, const std::string& workload, int rep) {
  std::string out = pattern;
  const std::pair<const char*, std::string> keys[] = {
      {"{policy}", policy}, {"{workload}", workload}, {"{rep}", std::to_string(rep)}};
  for (const auto& [key, value] : keys)
    for (auto at = out.find(key); at != std::string::npos; at = out.find(key, at + value.size()))
      out.replace(at, std::string(key).size(), value);
  return out;
}

std::string usage() {
  const std::string policies = joined(gcp::policy_names(), "|");
  const std::string workloads = joined(workload_names(), "|");
  const std::string capacity = gcp::format_bytes(gcp::allocator_options{}.host_capacity);
  return
      "usage: forward_loop [--backend auto|host|cuda|cuda_async] [--policy " + policies + "]\n"
      "                    [--workload " + workloads + "] [--reps N]\n"
      "                    [--iters N] [--layers N] [--d N] [--batch N] [--host-heap-mib N]\n"
      "                    [--hard-limit SIZE] [--soft-limit SIZE] [--trace FILE.csv] [--json] [--quiet]\n"
      "                    [--host-allocs N] [--host-capacity SIZE] [--gc-budget F] [--every-n N]\n"
      "                    [--promote-share F] [--burst-every N] [--burst-fraction F] [--hint-order before|after]\n"
      "                    [--array-objects global|thread-local] [--devices N|LIST] [--device D]\n"
      "                    [--max-seconds S] [--seed N] [--verbose] [--help] [--version]\n"
      "\n"
      "A Flux-style forward pass (layers x Dense y = relu.(W*x .+ b)) whose arrays are GC-owned\n"
      "device buffers that the loop drops, inside a simulated runtime with a live host heap. The\n"
      "compute is asynchronous (a CUDA stream, or the host stream's worker thread on the host\n"
      "backend); each iteration ends with the iteration hint and the policy's sync hint.\n"
      "\n"
      "  --backend         cuda_async (cudaMallocAsync; the default when a GPU is usable),\n"
      "                    cuda (cudaMalloc; cuda_sync is an alias), host (simulated device,\n"
      "                    CPU SGEMM) or auto - the names of GCPRESSURE_BACKEND, as it reads them\n"
      "  --policy          collection policy (default pressure); explicit_free frees every array\n"
      "                    itself the moment it dies (the oracle). A comma list or 'all' runs\n"
      "                    each in turn in this process (one host heap), one result per run\n"
      "  --workload        (default steady; a comma list or 'all' as for --policy)\n"
      "                    steady:  every iteration allocates and drops the same arrays\n"
      "                    promote: also keeps a share (--promote-share, default 0.25) of the\n"
      "                             arrays alive for 1..50 iterations (fixed seed), in a ring\n"
      "                    burst:   every --burst-every (50) iterations one step holds\n"
      "                             --burst-fraction (0.5) of the hard limit at once, then drops it\n"
      "                    varied:  also one array per layer of a size drawn log-uniformly from\n"
      "                             4 KiB to min(256 MiB, hard limit / 16), dropped at once\n"
      "  --reps N          repeat the policy x workload matrix N times (default 1)\n"
      "  --iters N         iterations (default 2000)\n"
      "  --layers/--d/--batch  model shape (default 4 layers, d=256, batch=32)\n"
      "  --host-heap-mib N live host heap of 64-byte linked GC objects (default 0)\n"
      "  --host-allocs N   small host GC allocations per iteration, all garbage (default 300)\n"
      "  --hard-limit SIZE device memory limit: bytes, 512MiB / \"64 MB\" (binary units) or % of\n"
      "                    device memory; forward_loop's default is 50% on CUDA and 256MiB on\n"
      "                    host (the library's own default, for other programs, is 100%)\n"
      "  --soft-limit SIZE the policy's target (default 75% of the hard limit; above the hard\n"
      "                    limit is an error)\n"
      "  --host-capacity SIZE  simulated device size on the host backend (default " + capacity + ")\n"
      "  --devices N       data-parallel replicas of the model, one per device (default 1): CUDA\n"
      "                    devices 0..N-1, or N simulated devices of --host-capacity on the host\n"
      "                    backend, each with the limits above, one policy over all. With N > 1\n"
      "                    the JSON's byte peaks are the most-pressed device's, its counts, other\n"
      "                    bytes and samples totals over the devices; \"devices\" has each one\n"
      "  --devices LIST    with a comma: these device ordinals, e.g. 0,2 (GCPRESSURE_DEVICES's list)\n"
      "  --device D        one device, ordinal D (default 0; GCPRESSURE_DEVICE)\n"
      "  --gc-budget F     fraction of wall time collections may take (default 0.05)\n"
      "  --every-n N       every_iteration: collect every N iterations (default 1)\n"
      "  --hint-order O    before (default): iteration hint, then the policy's synchronize;\n"
      "                    after: a plain wait for the device, then the iteration hint\n"
      "  --sync-every K    wait for the device every K iterations and after the last one\n"
      "                    (default 1; 0: only after the last); the hint comes every iteration\n"
      "  --array-objects A global (default): array objects from Boehm's global free lists\n"
      "                    (boehm::alloc_array_object, as the bridge asks runtimes to);\n"
      "                    thread-local: GC_MALLOC (often born marked: minors promote them)\n"
      "  --max-seconds S   stop after S seconds of loop time (reported as stopped_early)\n"
      "  --stop-file FILE  stop after the iteration during which FILE appears (stopped_early;\n"
      "                    a test's event, where --max-seconds would be a race)\n"
      "  --seed N          seed of the model and the workloads (default 42)\n"
      "  --trace FILE.csv  one row per iteration: iteration,live,reserved,collections,gc_seconds,\n"
      "                    exposed_gc_seconds,hidden_gc_seconds. Several runs: the name holds\n"
      "                    {policy}, {workload} and/or {rep} (1-based), one file per run\n"
      "  --json            print one JSON object per run (the last line for a single run);\n"
      "                    peak_reserved_iteration: the iteration that set the peak (0: set-up)\n"
      "  --quiet           no per-iteration lines\n"
      "  --verbose         the policy's per-collection lines on stderr\n"
      "  --version         the library's version and the backends this build has\n"
      "\n"
      "Every GCPRESSURE_* variable of the library (README.md, Configuration) sets a default;\n"
      "flags override them (--devices and --device over GCPRESSURE_DEVICE(S)). A bad variable is an error\n"
      "of its own, with the message a bad flag of the same value gets.\n"
      "GCPRESSURE_HOST_SHARED=FILE shares the host backend's capacity with other processes, and\n"
      "limits such as 80%avail follow the memory they leave (docs/DESIGN.md, Other tenants).\n"
      "\n"
      "Examples:\n"
      "  forward_loop --quiet                          # pressure policy, the summary only\n"
      "  forward_loop --policy at_limit --host-heap-mib 256 --quiet   # no library: the footprint climbs\n"
      "  forward_loop --policy at_limit,every_iteration,cudajl,pressure,explicit_free \\\n"
      "      --host-heap-mib 256 --max-seconds 5 --json --quiet > runs.jsonl\n"
      "  python3 bench/summarize.py --brief runs.jsonl # each policy against explicit_free (the oracle)\n"
      "  bash scripts/demo.sh                          # that comparison with a picture, in about a minute\n"
      "\n" + summary_glossary();
}

gcp::size_spec default_hard_limit(bool cuda) {
  gcp::size_spec s;
  if (cuda) s.percent = 50;
  else s.bytes = std::size_t{256} << 20;
  return s;
}

namespace {

// Note [One error per bad value] (core/src/config_detail.hpp): the flags
// that are options parse with the options table's parsers, so a bad value
// gets the message its GCPRESSURE_* variable would, naming the flag.
template <class F>
auto lib(F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const gcp::logic_error& e) {
    throw usage_error(e.what());
  }
}

long to_long(const std::string& flag, const std::string& v, long lo, long hi) {
  return lib([&] { return gcp::parse_integer(v, flag, lo, hi); });
}

double to_double(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo && x <= hi))
    throw usage_error(flag + ": expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                      v + "'");
  return x;
}

// The library's names: host | cuda (cudaMalloc) | cuda_async; "" = auto.
std::string to_backend(const std::string& flag, const std::string& v) {
  const gcp::backend_choice b = lib([&] { return gcp::parse_backend(v, flag); });
  return b == gcp::backend_choice::automatic ? std::string() : std::string(gcp::to_string(b));
}

// Defaults from the library's environment variables, where set: every option
// of the table applies (Note [The environment is the default layer]).
void apply_env(options& o) {
  gcp::config c;
  try {
    c = gcp::config_from_env();
  } catch (const gcp::logic_error& e) {
    throw environment_error(e.what());
  }
  auto set = [](const char* name) { return std::getenv(name) != nullptr && *std::getenv(name); };
  if (set("GCPRESSURE_BACKEND"))
    o.backend = c.backend == gcp::backend_choice::automatic ? std::string() : gcp::to_string(c.backend);
  if (set("GCPRESSURE_DEVICES") || set("GCPRESSURE_DEVICE")) {
    o.device_ordinals = c.device_list();
    o.devices = static_cast<int>(o.device_ordinals.size());
  }
  if (set("GCPRESSURE_HOST_CAPACITY")) o.host_capacity = c.host_capacity;
  if (set("GCPRESSURE_HOST_SHARED")) o.host_shared = c.host_shared;
  if (set("GCPRESSURE_HARD_LIMIT")) o.hard_limit = c.hard_limit;
  if (set("GCPRESSURE_SOFT_LIMIT")) o.soft_limit = c.soft_limit;
  if (set("GCPRESSURE_POOL")) o.pool = c.pool;
  if (set("GCPRESSURE_ASYNC_RELEASE_THRESHOLD")) o.async_release_threshold = c.async_release_threshold;
  if (set("GCPRESSURE_POLICY")) o.policy = c.policy;
  if (set("GCPRESSURE_GC_BUDGET")) o.gc_budget = c.gc_budget;
  if (set("GCPRESSURE_EVERY_N")) o.every_n = c.every_n;
  if (set("GCPRESSURE_VERBOSE")) o.verbose = c.verbose;
}

// Note [--devices: a count or a list]
// --devices N was a count (devices 0..N-1) before the options table had a
// `devices` row, a list of ordinals; flags are contracts, so a value without
// a comma stays a count and one with a comma is the table's list ("0,2"),
// parsed by its row (set_option) with its messages. --device D is the
// table's `device` row: one device, any ordinal. Either wins over
// GCPRESSURE_DEVICE(S), as flags do.
void apply_devices(options& o, const std::string& a, const std::string& v) {
  if (a == "--devices" && v.find(',') == std::string::npos) {
    o.devices = static_cast<int>(to_long(a, v, 1, 64));
    o.device_ordinals.clear();  // devices 0..N-1
    return;
  }
  gcp::config c;
  lib([&] { gcp::set_option(c, a == "--device" ? "device" : "devices", v, a); });
  o.device_ordinals = a == "--device" ? std::vector<int>{c.device} : c.devices;
  if (o.device_ordinals.size() > 64) throw usage_error(a + ": at most 64 devices, not " +
                                                       std::to_string(o.device_ordinals.size()));
  o.devices = static_cast<int>(o.device_ordinals.size());
}

// One flag with its value (the caller has checked the name is known).
void apply_flag(options& o, const std::string& a, const std::string& v) {
  if (a == "--backend") o.backend = to_backend(a, v);
  else if (a == "--policy") o.policy = v;
  else if (a == "--workload") o.workload = v;
  else if (a == "--reps") o.reps = static_cast<int>(to_long(a, v, 1, 1000));
  else if (a == "--iters") o.iters = static_cast<int>(to_long(a, v, 1, 100000000));
  else if (a == "--layers") o.layers = static_cast<int>(to_long(a, v, 1, 1000));
  else if (a == "--d") o.d = static_cast<int>(to_long(a, v, 1, 65536));
  else if (a == "--batch") o.batch = static_cast<int>(to_long(a, v, 1, 1 << 20));
  else if (a == "--host-heap-mib") o.host_heap_mib = static_cast<std::size_t>(to_long(a, v, 0, 1 << 20));
  else if (a == "--sync-every") o.sync_every = static_cast<int>(to_long(a, v, 0, 1 << 30));
  else if (a == "--devices" || a == "--device") apply_devices(o, a, v);
  else if (a == "--host-allocs") o.host_allocs = static_cast<int>(to_long(a, v, 0, 1 << 24));
  else if (a == "--hard-limit") o.hard_limit = lib([&] { return gcp::parse_size(v, a); });
  else if (a == "--soft-limit") o.soft_limit = lib([&] { return gcp::parse_size(v, a); });
  else if (a == "--host-capacity") o.host_capacity = lib([&] { return gcp::parse_bytes(v, a); });
  else if (a == "--gc-budget") o.gc_budget = lib([&] { return gcp::parse_fraction(v, a, 0, 1); });
  else if (a == "--every-n") o.every_n = static_cast<int>(to_long(a, v, 1, 1 << 30));
  else if (a == "--promote-share") o.promote_share = to_double(a, v, 0, 1);
  else if (a == "--burst-every") o.burst_every = static_cast<int>(to_long(a, v, 1, 1 << 30));
  else if (a == "--burst-fraction") o.burst_fraction = to_double(a, v, 0, 1);
  else if (a == "--max-seconds") o.max_seconds = to_double(a, v, 0, 1e9);
  else if (a == "--stop-file") o.stop_file = v;
  else if (a == "--seed") o.seed = static_cast<std::uint64_t>(to_long(a, v, 0, 0x7fffffffL));
  else if (a == "--trace") o.trace = v;
  else if (a == "--array-objects") {
    if (v != "global" && v != "thread-local")
      throw usage_error("--array-objects: expected global or thread-local, got '" + v + "'");
    o.global_array_objects = v == "global";
  } else if (a == "--hint-order") {
    if (v != "before" && v != "after") throw usage_error("--hint-order: expected before or after, got '" + v + "'");
    o.hint_before_sync = v == "before";
  }
}

const char* const valued_flags[] = {
    "--backend", "--policy", "--workload", "--reps", "--iters", "--layers", "--d", "--batch", "--host-heap-mib",
    "--host-allocs", "--hard-limit", "--soft-limit", "--host-capacity", "--gc-budget", "--every-n",
    "--promote-share", "--burst-every", "--burst-fraction", "--max-seconds", "--seed", "--trace", "--hint-order",
    "--array-objects", "--devices", "--device", "--sync-every", "--stop-file",
    nullptr};

}  // namespace

options parse_args(int argc, char** argv, bool* help, options o) {
  if (help) *help = false;
  apply_env(o);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    bool has_inline = false;
    if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    bool* toggle = a == "--json"      ? &o.json
                   : a == "--quiet"   ? &o.quiet
                   : a == "--verbose" ? &o.verbose
                   : a == "--version" ? &o.version
                                      : nullptr;
    if (a == "--help" || a == "-h" || toggle) {
      if (has_inline) throw usage_error(a + " takes no value");
      if (toggle) *toggle = true;
      else if (help) *help = true;
    } else if (in_list(valued_flags, a)) {
      if (!has_inline) {
        if (i + 1 >= argc) throw usage_error(a + ": missing value");
        v = argv[++i];
      }
      apply_flag(o, a, v);
    } else {
      throw usage_error("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
  for (const auto& p : split(o.policy, gcp::policy_names())) lib([&] { return gcp::parse_policy(p, "--policy"); });
  for (const auto& w : split(o.workload, workload_names()))
    if (!in_list(workload_names(), w))
      throw usage_error("--workload: unknown workload '" + w + "' (expected " + joined(workload_names(), ", ") +
                        " or all)");
  if (!o.trace.empty()) {
    const auto runs = expand(o);
    for (std::size_t i = 1; i < runs.size(); ++i)
      if (runs[i].trace == runs[0].trace)
        throw usage_error("--trace: " + std::to_string(runs.size()) + " runs would write one file '" + o.trace +
                          "'; put {policy}, {workload} or {rep} in the name (e.g. traces/{policy}-{rep}.csv)");
  }
  return o;
}

std::vector<options> expand(const options& o) {
  std::vector<options> runs;
  const auto policies = split(o.policy, gcp::policy_names());
  const auto workloads = split(o.workload, workload_names());
  for (int rep = 0; rep < o.reps; ++rep)
    for (const auto& w : workloads)
      for (const auto& p : policies) {
        options r = o;
        r.policy = p;
        r.workload = w;
        r.reps = 1;
        r.trace = trace_name(o.trace, p, w, rep + 1);
        runs.push_back(r);
      }
  return runs;
}

}  // namespace fwd
