// The options table: one place that names every GCPRESSURE_* variable.
#include "gcpressure/config.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "gcpressure/error.hpp"

namespace gcpressure {

namespace {

const option_info k_options[] = {
    {"GCPRESSURE_BACKEND", "auto", "auto | host | cuda | cuda_async (auto: cuda_async with a GPU, else host)"},
    {"GCPRESSURE_DEVICE", "0", "CUDA device ordinal"},
    {"GCPRESSURE_HOST_CAPACITY", "16GiB", "capacity of the simulated (host) device"},
    {"GCPRESSURE_SOFT_LIMIT", "75% of hard", "device bytes above which the policy collects eagerly"},
    {"GCPRESSURE_HARD_LIMIT", "100%", "device bytes the library never reserves beyond"},
    {"GCPRESSURE_POOL", "1", "cache freed blocks in the library's pool"},
    {"GCPRESSURE_ASYNC_RELEASE_THRESHOLD", "0", "bytes the cudaMallocAsync pool keeps across syncs"},
    {"GCPRESSURE_POLICY", "pressure", "pressure | at_limit | every_iteration | cudajl | dotnet | explicit_free"},
    {"GCPRESSURE_GC_BUDGET", "0.05", "fraction of wall time the policy may spend collecting"},
    {"GCPRESSURE_EVERY_N", "1", "every_iteration policy: collect every N iterations"},
    {"GCPRESSURE_VERBOSE", "0", "log every collection the policy asks for to stderr"},
    {nullptr, nullptr, nullptr},
};

[[noreturn]] void bad(std::string_view what, std::string_view text, const char* why) {
  GCPRESSURE_FAIL(std::string("invalid value for ") + std::string(what) + ": '" + std::string(text) + "' (" +
                  why + ")");
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

}  // namespace

std::size_t size_spec::resolve(std::size_t total) const noexcept {
  if (percent >= 0) return static_cast<std::size_t>(static_cast<long double>(total) * percent / 100.0L);
  return bytes;
}

std::string size_spec::to_string() const {
  if (percent >= 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g%%", percent);
    return buf;
  }
  return bytes ? format_bytes(bytes) : std::string("unset");
}

size_spec parse_size(std::string_view text, std::string_view what) {
  std::string s = trim(text);
  if (s.empty()) bad(what, text, "empty");
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) bad(what, text, "expected a number, e.g. 512MiB, 4GiB, 4G or 80%");
  const std::string num = s.substr(0, i);
  std::string unit = trim(std::string_view(s).substr(i));
  char* end = nullptr;
  errno = 0;
  const long double value = std::strtold(num.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(static_cast<double>(value)))
    bad(what, text, "malformed number");
  size_spec out;
  if (unit == "%") {
    if (value <= 0 || value > 100) bad(what, text, "a percentage must be in (0, 100]");
    out.percent = static_cast<double>(value);
    return out;
  }
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
  if (mult == 0) bad(what, text, "unknown unit; use B, KiB, MiB, GiB, TiB (or K, M, G, T) or %");
  const long double bytes = value * mult;
  if (bytes < 1) bad(what, text, "a size must be at least 1 byte");
  if (bytes > static_cast<long double>(max_request_bytes) * 64) bad(what, text, "size too large");
  out.bytes = static_cast<std::size_t>(bytes);
  return out;
}

config config_from_env(config c) {
  if (const char* v = env("GCPRESSURE_BACKEND")) {
    std::string s = trim(v);
    if (iequals(s, "auto")) c.backend = backend_choice::automatic;
    else if (iequals(s, "host")) c.backend = backend_choice::host;
    else if (iequals(s, "cuda")) c.backend = backend_choice::cuda;
    else if (iequals(s, "cuda_async")) c.backend = backend_choice::cuda_async;
    else bad("GCPRESSURE_BACKEND", v, "expected auto, host, cuda or cuda_async");
  }
  if (const char* v = env("GCPRESSURE_DEVICE")) c.device = static_cast<int>(parse_int("GCPRESSURE_DEVICE", v, 0, 1023));
  if (const char* v = env("GCPRESSURE_HOST_CAPACITY")) {
    size_spec s = parse_size(v, "GCPRESSURE_HOST_CAPACITY");
    if (s.percent >= 0) bad("GCPRESSURE_HOST_CAPACITY", v, "must be bytes, not a percentage");
    c.host_capacity = s.bytes;
  }
  if (const char* v = env("GCPRESSURE_SOFT_LIMIT")) c.soft_limit = parse_size(v, "GCPRESSURE_SOFT_LIMIT");
  if (const char* v = env("GCPRESSURE_HARD_LIMIT")) c.hard_limit = parse_size(v, "GCPRESSURE_HARD_LIMIT");
  if (const char* v = env("GCPRESSURE_POOL")) c.pool = parse_bool("GCPRESSURE_POOL", v);
  if (const char* v = env("GCPRESSURE_ASYNC_RELEASE_THRESHOLD")) {
    size_spec s = parse_size(v, "GCPRESSURE_ASYNC_RELEASE_THRESHOLD");
    if (s.percent >= 0) bad("GCPRESSURE_ASYNC_RELEASE_THRESHOLD", v, "must be bytes, not a percentage");
    c.async_release_threshold = s.bytes;
  }
  if (const char* v = env("GCPRESSURE_POLICY")) {
    std::string s = trim(v);
    static const char* known[] = {"pressure", "at_limit", "every_iteration", "cudajl", "dotnet", "explicit_free"};
    bool ok = false;
    for (const char* k : known) ok = ok || s == k;
    if (!ok) bad("GCPRESSURE_POLICY", v, "expected pressure, at_limit, every_iteration, cudajl, dotnet or explicit_free");
    c.policy = s;
  }
  if (const char* v = env("GCPRESSURE_GC_BUDGET")) {
    std::string s = trim(v);
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(x > 0 && x <= 1)) bad("GCPRESSURE_GC_BUDGET", v, "expected a fraction in (0, 1]");
    c.gc_budget = x;
  }
  if (const char* v = env("GCPRESSURE_EVERY_N")) c.every_n = static_cast<int>(parse_int("GCPRESSURE_EVERY_N", v, 1, 1 << 30));
  if (const char* v = env("GCPRESSURE_VERBOSE")) c.verbose = parse_bool("GCPRESSURE_VERBOSE", v);
  return c;
}

const option_info* options_table() noexcept { return k_options; }

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
