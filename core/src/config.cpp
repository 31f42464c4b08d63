// The options table: one place that names every option, its GCPRESSURE_*
// variable, kind, range, default and field (mimalloc's src/util/options.c is
// the model), set_option over it, and the three layers of
// Note [The environment is the default layer].
#include "gcpressure/config.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <utility>
#include <variant>
#include <vector>

#include <unistd.h>  // environ

#include "config_detail.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure {

namespace {

using detail::bad_value;
using detail::trim;

// A parsed value: one alternative per option_kind's result type.
using value = std::variant<size_spec, std::size_t, backend_choice, std::string, double, int, bool, std::vector<int>>;

// A row: the public part and its target field in both layers.
struct row {
  option_info info;
  void (*to_config)(config&, value&&);
  void (*to_options)(options&, value&&);
};

#define GCP_TARGET(field, type)                                                    \
  [](config& c, value&& v) { c.field = std::get<type>(std::move(v)); },           \
      [](options& o, value&& v) { o.field = std::get<type>(std::move(v)); }

constexpr double k_max_bytes = 1e18;  // a range's "no bound" for bytes (parse_size caps sizes lower)

// Note [The policy row names policy_names()]
// The policy names are listed once, in core/src/baselines.cpp; the table's
// row for GCPRESSURE_POLICY is built from them on first use. The text is
// leaked so that the table stays valid for heaps torn down after main.
const std::vector<row>& rows() {
  static const std::string* const policies = new std::string(policy_names_text(" | "));
  using K = option_kind;
  static const std::vector<row>* const r = new std::vector<row>{
      {{"GCPRESSURE_BACKEND", "auto",
        "auto | host | cuda (cudaMalloc; alias cuda_sync) | cuda_async (cudaMallocAsync); auto: cuda_async with a "
        "GPU, else host",
        "backend", K::backend, 0, 0},
       GCP_TARGET(backend, backend_choice)},
      {{"GCPRESSURE_DEVICE", "0", "CUDA device ordinal", "device", K::integer, 0, max_device_ordinal},
       GCP_TARGET(device, int)},
      {{"GCPRESSURE_DEVICES", "(GCPRESSURE_DEVICE)",
        "device ordinals served by one policy, e.g. 0,1 (wins over GCPRESSURE_DEVICE)", "devices", K::devices, 0,
        0},
       GCP_TARGET(devices, std::vector<int>)},
      {{"GCPRESSURE_HOST_CAPACITY", "16GiB", "capacity of the simulated (host) device", "host_capacity", K::bytes, 1,
        k_max_bytes},
       GCP_TARGET(host_capacity, std::size_t)},
      {{"GCPRESSURE_HOST_SHARED", "unset",
        "file whose simulated (host) device capacity several processes share (POSIX)", "host_shared", K::text, 0, 0},
       GCP_TARGET(host_shared, std::string)},
      {{"GCPRESSURE_SOFT_LIMIT", "75% of hard",
        "device bytes above which the policy collects eagerly (N%avail: of available memory)", "soft_limit", K::size,
        0, 0},
       GCP_TARGET(soft_limit, size_spec)},
      {{"GCPRESSURE_HARD_LIMIT", "100%",
        "device bytes the library never reserves beyond (N%avail: of free + own reserved, re-resolved)", "hard_limit",
        K::size, 0, 0},
       GCP_TARGET(hard_limit, size_spec)},
      {{"GCPRESSURE_POOL", "1", "cache freed blocks in the library's pool", "pool", K::boolean, 0, 1},
       GCP_TARGET(pool, bool)},
      {{"GCPRESSURE_ASYNC_RELEASE_THRESHOLD", "0", "bytes the cudaMallocAsync pool keeps across syncs",
        "async_release_threshold", K::bytes, 0, k_max_bytes},
       GCP_TARGET(async_release_threshold, std::size_t)},
      {{"GCPRESSURE_POLICY", "pressure", policies->c_str(), "policy", K::policy, 0, 0}, GCP_TARGET(policy, std::string)},
      {{"GCPRESSURE_GC_BUDGET", "0.05", "fraction of wall time the policy may spend collecting", "gc_budget",
        K::fraction, 0, 1},
       GCP_TARGET(gc_budget, double)},
      {{"GCPRESSURE_EVERY_N", "1", "every_iteration policy: collect every N iterations", "every_n", K::integer, 1,
        1 << 30},
       GCP_TARGET(every_n, int)},
      {{"GCPRESSURE_VERBOSE", "0", "log every collection the policy asks for to stderr", "verbose", K::boolean, 0, 1},
       GCP_TARGET(verbose, bool)},
  };
  return *r;
}

#undef GCP_TARGET

const std::vector<option_info>& infos() {
  static const std::vector<option_info>* const v = [] {
    auto* out = new std::vector<option_info>;
    for (const row& r : rows()) out->push_back(r.info);
    out->push_back(option_info{nullptr, nullptr, nullptr, nullptr, option_kind::text, 0, 0});
    return out;
  }();
  return *v;
}

const row* find_row(std::string_view name) noexcept {
  for (const row& r : rows())
    if (name == r.info.name || name == r.info.env) return &r;
  return nullptr;
}

const row& row_or_throw(std::string_view name) {
  if (const row* r = find_row(name)) return *r;
  std::string names;
  for (const row& r : rows()) names += (names.empty() ? "" : ", ") + std::string(r.info.name);
  throw logic_error("gcpressure: unknown option '" + std::string(name) + "' (expected " + names + ")");
}

// The row's kind's parser, with the row's range.
value parse(const option_info& i, std::string_view text, std::string_view what) {
  switch (i.kind) {
    case option_kind::size: return parse_size(text, what);
    case option_kind::bytes:
      return parse_bytes(text, what, static_cast<std::size_t>(i.min),
                         i.max >= k_max_bytes ? std::size_t(-1) : static_cast<std::size_t>(i.max));
    case option_kind::backend: return parse_backend(text, what);
    case option_kind::policy: return parse_policy(text, what);
    case option_kind::fraction: return parse_fraction(text, what, i.min, i.max);
    case option_kind::integer:
      return static_cast<int>(parse_integer(text, what, static_cast<long>(i.min), static_cast<long>(i.max)));
    case option_kind::boolean: return parse_bool(text, what);
    case option_kind::devices: return parse_device_list(text, what);
    case option_kind::text: return trim(text);
  }
  GCPRESSURE_FAIL("options table: unknown kind");
}

void warn_unknown_env_once();

}  // namespace

const option_info* options_table() noexcept { return infos().data(); }

const option_info* find_option(std::string_view name) noexcept {
  const row* r = find_row(name);
  return r ? &infos()[static_cast<std::size_t>(r - rows().data())] : nullptr;
}

void set_option(config& c, std::string_view name, std::string_view text, std::string_view what) {
  const row& r = row_or_throw(name);
  r.to_config(c, parse(r.info, text, what.empty() ? std::string_view(r.info.name) : what));
}

void set_option(options& o, std::string_view name, std::string_view text, std::string_view what) {
  const row& r = row_or_throw(name);
  r.to_options(o, parse(r.info, text, what.empty() ? std::string_view(r.info.name) : what));
  if (r.info.name == std::string_view("device")) o.devices.reset();  // one device asked for: no list
}

void check_option(std::string_view name, std::string_view text, std::string_view what) {
  config scratch;
  set_option(scratch, name, text, what);
}

std::vector<int> config::device_list() const { return devices.empty() ? std::vector<int>{device} : devices; }

config config_from_env(config c) {
  warn_unknown_env_once();
  for (const row& r : rows()) {
    const char* v = std::getenv(r.info.env);
    if (v && *v) r.to_config(c, parse(r.info, v, r.info.env));
  }
  return c;
}

// Values a program sets in C++ are checked by the same rules as text: the
// message shows the value as text.
config apply_options(const options& o, config c) {
  if (o.backend) c.backend = *o.backend;
  if (o.device) {
    c.device = static_cast<int>(parse_integer(std::to_string(*o.device), "options.device", 0, max_device_ordinal));
    c.devices.clear();  // the program asked for one device: a GCPRESSURE_DEVICES list does not apply
  }
  if (o.devices) {
    std::string text;
    for (int d : *o.devices) text += (text.empty() ? "" : ",") + std::to_string(d);
    c.devices = parse_device_list(text, "options.devices");
  }
  if (o.host_capacity) {
    if (*o.host_capacity == 0) bad_value("options.host_capacity", "0", "a size must be at least 1 byte");
    c.host_capacity = *o.host_capacity;
  }
  if (o.host_shared) c.host_shared = *o.host_shared;  // "" = private capacity
  for (auto [field, what] : {std::pair{&o.soft_limit, "options.soft_limit"}, {&o.hard_limit, "options.hard_limit"}}) {
    if (!*field) continue;
    const size_spec& s = **field;
    // Checked as its text would be: a percentage in (0, 100], a size in range.
    if (s.percent >= 0 || s.bytes > 0) (void)parse_size(s.percent >= 0 ? s.to_string() : std::to_string(s.bytes), what);
    if (s.of_available && s.percent < 0) bad_value(what, s.to_string(), "of_available needs a percentage");
  }
  if (o.soft_limit) c.soft_limit = *o.soft_limit;
  if (o.hard_limit) c.hard_limit = *o.hard_limit;
  if (o.pool) c.pool = *o.pool;
  if (o.async_release_threshold) c.async_release_threshold = *o.async_release_threshold;
  if (o.policy) c.policy = parse_policy(*o.policy, "options.policy");
  if (o.gc_budget) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", *o.gc_budget);  // round-trips exactly
    c.gc_budget = parse_fraction(text, "options.gc_budget", 0, 1);
  }
  if (o.every_n) c.every_n = static_cast<int>(parse_integer(std::to_string(*o.every_n), "options.every_n", 1, 1 << 30));
  if (o.verbose) c.verbose = *o.verbose;
  return c;
}

config resolve_config(const options& o) { return apply_options(o, config_from_env()); }

// --- variables that are no option ---------------------------------------------

namespace {

// Variables of the project's tools and tests (not options): never "unknown".
const char* const k_tool_variables[] = {
    "GCPRESSURE_LIB",         "GCPRESSURE_LUA_CUDA",
    "GCPRESSURE_FUZZ",        "GCPRESSURE_FUZZ_SECONDS",  "GCPRESSURE_FAULT_OPS",      "GCPRESSURE_GPU_FAULT_OPS",
    "GCPRESSURE_SOAK_ALLOCS", "GCPRESSURE_SOAK_WATCHDOG_S", "GCPRESSURE_GPU_SOAK_ALLOCS", "GCPRESSURE_SHUTDOWN_RUNS",
    "GCPRESSURE_SHUTDOWN_CYCLES", "GCPRESSURE_SANITIZE",  "GCPRESSURE_WITH_CUDA",
};
// Prefixes reserved for tools and tests, so new test knobs need no entry here.
const char* const k_tool_prefixes[] = {"GCPRESSURE_TEST_", "GCPRESSURE_BENCH_", "GCPRESSURE_CI_", "GCPRESSURE_TORCH_"};

bool known_variable(std::string_view name) {
  for (const row& r : rows())
    if (name == r.info.env) return true;
  for (const char* t : k_tool_variables)
    if (name == t) return true;
  for (const char* p : k_tool_prefixes)
    if (name.substr(0, std::strlen(p)) == p) return true;
  return false;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> r(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) r[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = r[0];
    r[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = r[j];
      r[j] = std::min({r[j] + 1, r[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return r[b.size()];
}

// Note [Unknown variables warn once]
// A misspelt GCPRESSURE_HARD_LIMT used to be ignored in silence, the program
// then ran without the limit its user believed set. Failing would break
// programs over a variable meant for another version, so it is a warning:
// once per name per process (the environment is read at every heap's
// creation), on stderr, naming the closest option.
std::mutex g_warned_mu;
std::set<std::string>& warned_names() {
  static std::set<std::string> s;
  return s;
}

void warn_unknown_env_once() {
  const std::vector<std::string> msgs = detail::unknown_env_warnings();
  if (msgs.empty()) return;
  std::lock_guard<std::mutex> lk(g_warned_mu);
  for (const std::string& m : msgs) {
    const std::string name = m.substr(0, m.find(' '));
    if (warned_names().insert(name).second) std::fprintf(stderr, "gcpressure: warning: %s\n", m.c_str());
  }
}

}  // namespace

namespace detail {

std::string closest_option_name(std::string_view name) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const row& r : rows()) {
    const std::size_t d = edit_distance(name, r.info.env);
    if (d < best_d) best_d = d, best = r.info.env;
  }
  // Close: a few typos, not merely the shared GCPRESSURE_ prefix.
  const std::size_t tail = name.size() > 11 ? name.size() - 11 : 0;
  return best_d <= std::max<std::size_t>(2, tail / 3) ? best : std::string();
}

std::vector<std::string> unknown_env_warnings() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (name.substr(0, 11) != "GCPRESSURE_" || known_variable(name)) continue;
    std::string m = std::string(name) + " is not a gcpressure option and is ignored";
    const std::string near = closest_option_name(name);
    m += near.empty() ? " (the options are listed in README.md, Configuration)" : " (did you mean " + near + "?)";
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace detail

}  // namespace gcpressure
