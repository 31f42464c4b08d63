// The options table: one place that names every GCPRESSURE_* variable.
#include "gcpressure/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <vector>

#include <unistd.h>  // environ

#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure {

namespace {

// Note [The policy row names policy_names()]
// The policy names are listed once, in core/src/baselines.cpp; the table's
// row for GCPRESSURE_POLICY is built from them on first use. The text is
// leaked so that the table stays valid for heaps torn down after main.
const option_info* table() noexcept {
  static const std::string* const policies = new std::string(policy_names_text(" | "));
  static const option_info k_options[] = {
      {"GCPRESSURE_BACKEND", "auto",
       "auto | host | cuda (cudaMalloc) | cuda_async (cudaMallocAsync); auto: cuda_async with a GPU, else host"},
      {"GCPRESSURE_DEVICE", "0", "CUDA device ordinal"},
      {"GCPRESSURE_DEVICES", "(GCPRESSURE_DEVICE)",
       "device ordinals served by one policy, e.g. 0,1 (wins over GCPRESSURE_DEVICE)"},
      {"GCPRESSURE_HOST_CAPACITY", "16GiB", "capacity of the simulated (host) device"},
      {"GCPRESSURE_HOST_SHARED", "unset", "file whose simulated (host) device capacity several processes share (POSIX)"},
      {"GCPRESSURE_SOFT_LIMIT", "75% of hard",
       "device bytes above which the policy collects eagerly (N%avail: of available memory)"},
      {"GCPRESSURE_HARD_LIMIT", "100%",
       "device bytes the library never reserves beyond (N%avail: of free + own reserved, re-resolved)"},
      {"GCPRESSURE_POOL", "1", "cache freed blocks in the library's pool"},
      {"GCPRESSURE_ASYNC_RELEASE_THRESHOLD", "0", "bytes the cudaMallocAsync pool keeps across syncs"},
      {"GCPRESSURE_POLICY", "pressure", policies->c_str()},
      {"GCPRESSURE_GC_BUDGET", "0.05", "fraction of wall time the policy may spend collecting"},
      {"GCPRESSURE_EVERY_N", "1", "every_iteration policy: collect every N iterations"},
      {"GCPRESSURE_VERBOSE", "0", "log every collection the policy asks for to stderr"},
      {nullptr, nullptr, nullptr},
  };
  return k_options;
}

// A configuration error is the user's input, not a bug: the message names the
// variable (or option) and the value, and carries no source location.
[[noreturn]] void bad(std::string_view what, std::string_view text, const char* why) {
  throw logic_error("gcpressure: invalid value for " + std::string(what) + ": '" + std::string(text) + "' (" + why +
                    ")");
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

bool parse_bool(const char* name, const char* v) {
  std::string s = trim(v);
  if (s == "1" || iequals(s, "true") || iequals(s, "on") || iequals(s, "yes")) return true;
  if (s == "0" || iequals(s, "false") || iequals(s, "off") || iequals(s, "no")) return false;
  bad(name, v, "expected 0 or 1");
}

long parse_int(const char* name, const char* v, long lo, long hi) {
  std::string s = trim(v);
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE) bad(name, v, "expected an integer");
  if (x < lo || x > hi) bad(name, v, "out of range");
  return x;
}

constexpr int k_max_device = 1023;

// Bytes, not a percentage (capacities and thresholds are not fractions of the device).
std::size_t parse_bytes(const char* name, const char* v);

std::string check_policy(std::string_view what, std::string s) {
  if (is_policy_name(s)) return s;
  bad(what, s, ("expected " + policy_names_text(", ", " or ")).c_str());
}

double check_budget(std::string_view what, double x, std::string_view text) {
  if (!(x > 0 && x <= 1)) bad(what, text, "expected a fraction in (0, 1]");
  return x;
}

size_spec check_spec(std::string_view what, size_spec s) {
  if (s.of_available && s.percent < 0) bad(what, s.to_string(), "of_available needs a percentage");
  if (s.percent >= 0) {
    if (!(s.percent > 0 && s.percent <= 100)) bad(what, s.to_string(), "a percentage must be in (0, 100]");
  } else if (s.bytes > max_request_bytes * 64) {
    bad(what, std::to_string(s.bytes), "size too large");
  }
  return s;
}

void warn_unknown_env_once();

}  // namespace

std::size_t size_spec::resolve(std::size_t total) const noexcept {
  if (percent >= 0) return static_cast<std::size_t>(static_cast<long double>(total) * percent / 100.0L);
  return bytes;
}

std::string size_spec::to_string() const {
  if (percent >= 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, of_available ? "%g%%avail" : "%g%%", percent);
    return buf;
  }
  return bytes ? format_bytes(bytes) : std::string("unset");
}

size_spec parse_size(std::string_view text, std::string_view what) {
  std::string s = trim(text);
  if (s.empty()) bad(what, text, "empty");
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) bad(what, text, "expected a number, e.g. 512MiB, 4GiB, 4G, 80% or 80%avail");
  const std::string num = s.substr(0, i);
  std::string unit = trim(std::string_view(s).substr(i));
  char* end = nullptr;
  errno = 0;
  const long double value = std::strtold(num.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(static_cast<double>(value)))
    bad(what, text, "malformed number");
  size_spec out;
  // "%" of the device total; "%avail" of the available memory (Note [Limits
  // of available memory]); a blank between them is allowed ("80% avail").
  const bool avail = unit.size() > 1 && unit[0] == '%' && iequals(trim(std::string_view(unit).substr(1)), "avail");
  if (unit == "%" || avail) {
    if (value <= 0 || value > 100) bad(what, text, "a percentage must be in (0, 100]");
    out.percent = static_cast<double>(value);
    out.of_available = avail;
    return out;
  }
  if (!unit.empty() && unit[0] == '%') bad(what, text, "unknown percentage; use 80% (of the device) or 80%avail");
  long double mult = 0;
  struct suffix {
    const char* name;
    long double mult;
  };
  static const suffix table[] = {{"", 1},          {"B", 1},          {"K", 1024.0L},   {"KB", 1024.0L},
                                 {"KiB", 1024.0L}, {"M", 1048576.0L}, {"MB", 1048576.0L}, {"MiB", 1048576.0L},
                                 {"G", 1073741824.0L}, {"GB", 1073741824.0L}, {"GiB", 1073741824.0L},
                                 {"T", 1099511627776.0L}, {"TB", 1099511627776.0L}, {"TiB", 1099511627776.0L}};
  for (const auto& sfx : table)
    if (iequals(unit, sfx.name)) mult = sfx.mult;
  if (mult == 0) bad(what, text, "unknown unit; use B, KiB, MiB, GiB, TiB (or K, M, G, T), % or %avail");
  const long double bytes = value * mult;
  if (bytes < 1) bad(what, text, "a size must be at least 1 byte");
  if (bytes > static_cast<long double>(max_request_bytes) * 64) bad(what, text, "size too large");
  out.bytes = static_cast<std::size_t>(bytes);
  return out;
}

namespace {

std::size_t parse_bytes(const char* name, const char* v) {
  const size_spec s = parse_size(v, name);
  if (s.percent >= 0) bad(name, v, "must be bytes, not a percentage");
  return s.bytes;
}

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
  for (const option_info* o = table(); o->env; ++o)
    if (name == o->env) return true;
  for (const char* t : k_tool_variables)
    if (name == t) return true;
  for (const char* p : k_tool_prefixes)
    if (name.substr(0, std::strlen(p)) == p) return true;
  return false;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
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
  for (const option_info* o = table(); o->env; ++o) {
    const std::size_t d = edit_distance(name, o->env);
    if (d < best_d) best_d = d, best = o->env;
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

backend_choice parse_backend(std::string_view text, std::string_view what) {
  const std::string s = trim(text);
  if (iequals(s, "auto")) return backend_choice::automatic;
  if (iequals(s, "host")) return backend_choice::host;
  if (iequals(s, "cuda")) return backend_choice::cuda;
  if (iequals(s, "cuda_async")) return backend_choice::cuda_async;
  bad(what, text, "expected auto, host, cuda (cudaMalloc) or cuda_async (cudaMallocAsync)");
}

const char* to_string(backend_choice b) noexcept {
  switch (b) {
    case backend_choice::automatic: return "auto";
    case backend_choice::host: return "host";
    case backend_choice::cuda: return "cuda";
    case backend_choice::cuda_async: return "cuda_async";
  }
  return "?";
}

std::vector<int> parse_device_list(std::string_view text, std::string_view what) {
  const std::string w(what), all(text);
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= all.size()) {
    const std::size_t comma = std::min(all.find(',', at), all.size());
    const std::string item = trim(all.substr(at, comma - at).c_str());
    if (item.empty()) bad(w.c_str(), all, "expected device ordinals separated by commas, e.g. 0,1");
    const int d = static_cast<int>(parse_int(w.c_str(), item.c_str(), 0, k_max_device));
    if (std::find(out.begin(), out.end(), d) != out.end()) bad(w.c_str(), all, "a device is listed twice");
    out.push_back(d);
    at = comma + 1;
  }
  return out;
}

std::vector<int> config::device_list() const { return devices.empty() ? std::vector<int>{device} : devices; }

config config_from_env(config c) {
  warn_unknown_env_once();
  if (const char* v = env("GCPRESSURE_BACKEND")) c.backend = parse_backend(v, "GCPRESSURE_BACKEND");
  if (const char* v = env("GCPRESSURE_DEVICE")) c.device = static_cast<int>(parse_int("GCPRESSURE_DEVICE", v, 0, k_max_device));
  if (const char* v = env("GCPRESSURE_DEVICES")) c.devices = parse_device_list(v, "GCPRESSURE_DEVICES");
  if (const char* v = env("GCPRESSURE_HOST_CAPACITY")) c.host_capacity = parse_bytes("GCPRESSURE_HOST_CAPACITY", v);
  if (const char* v = env("GCPRESSURE_HOST_SHARED")) c.host_shared = trim(v);
  if (const char* v = env("GCPRESSURE_SOFT_LIMIT")) c.soft_limit = parse_size(v, "GCPRESSURE_SOFT_LIMIT");
  if (const char* v = env("GCPRESSURE_HARD_LIMIT")) c.hard_limit = parse_size(v, "GCPRESSURE_HARD_LIMIT");
  if (const char* v = env("GCPRESSURE_POOL")) c.pool = parse_bool("GCPRESSURE_POOL", v);
  if (const char* v = env("GCPRESSURE_ASYNC_RELEASE_THRESHOLD"))
    c.async_release_threshold = parse_bytes("GCPRESSURE_ASYNC_RELEASE_THRESHOLD", v);
  if (const char* v = env("GCPRESSURE_POLICY")) c.policy = check_policy("GCPRESSURE_POLICY", trim(v));
  if (const char* v = env("GCPRESSURE_GC_BUDGET")) {
    const std::string s = trim(v);
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0') bad("GCPRESSURE_GC_BUDGET", v, "expected a fraction in (0, 1]");
    c.gc_budget = check_budget("GCPRESSURE_GC_BUDGET", x, v);
  }
  if (const char* v = env("GCPRESSURE_EVERY_N")) c.every_n = static_cast<int>(parse_int("GCPRESSURE_EVERY_N", v, 1, 1 << 30));
  if (const char* v = env("GCPRESSURE_VERBOSE")) c.verbose = parse_bool("GCPRESSURE_VERBOSE", v);
  return c;
}

config apply_options(const options& o, config c) {
  if (o.backend) c.backend = *o.backend;
  if (o.device) {
    if (*o.device < 0 || *o.device > k_max_device) bad("options.device", std::to_string(*o.device), "out of range");
    c.device = *o.device;
    c.devices.clear();  // the program asked for one device: a GCPRESSURE_DEVICES list does not apply
  }
  if (o.devices) {
    std::string text;
    for (int d : *o.devices) {
      if (!text.empty()) text += ',';
      text += std::to_string(d);
    }
    c.devices = parse_device_list(text, "options.devices");
  }
  if (o.host_capacity) {
    if (*o.host_capacity == 0) bad("options.host_capacity", "0", "a size must be at least 1 byte");
    c.host_capacity = *o.host_capacity;
  }
  if (o.host_shared) c.host_shared = *o.host_shared;  // "" = private capacity
  if (o.soft_limit) c.soft_limit = check_spec("options.soft_limit", *o.soft_limit);
  if (o.hard_limit) c.hard_limit = check_spec("options.hard_limit", *o.hard_limit);
  if (o.pool) c.pool = *o.pool;
  if (o.async_release_threshold) c.async_release_threshold = *o.async_release_threshold;
  if (o.policy) c.policy = check_policy("options.policy", *o.policy);
  if (o.gc_budget) c.gc_budget = check_budget("options.gc_budget", *o.gc_budget, std::to_string(*o.gc_budget));
  if (o.every_n) {
    if (*o.every_n < 1) bad("options.every_n", std::to_string(*o.every_n), "must be >= 1");
    c.every_n = *o.every_n;
  }
  if (o.verbose) c.verbose = *o.verbose;
  return c;
}

config resolve_config(const options& o) { return apply_options(o, config_from_env()); }

const option_info* options_table() noexcept { return table(); }

std::string format_bytes(std::size_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu B", b);
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace gcpressure
