// config_parse.cpp — one parser per option kind (config.hpp's option_kind):
// sizes, backends, policies, fractions, integers, booleans, device lists.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "config_detail.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure {

namespace detail {

void bad_value(std::string_view what, std::string_view text, std::string_view why) {
  throw logic_error("gcpressure: invalid value for " + std::string(what) + ": '" + std::string(text) + "' (" +
                    std::string(why) + ")");
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

}  // namespace detail

namespace {

using detail::bad_value;
using detail::iequals;
using detail::trim;

constexpr long double k_max_size = static_cast<long double>(max_request_bytes) * 64;

// A size's number and unit; `allow_zero`: "0" is a size (a threshold), not
// an error. Percentages only where `percent_ok`.
size_spec parse_size_text(std::string_view text, std::string_view what, bool percent_ok, bool allow_zero) {
  const std::string s = trim(text);
  if (s.empty()) bad_value(what, text, "empty");
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0)
    bad_value(what, text, percent_ok ? "expected a number, e.g. 512MiB, 4GiB, 4G, 80% or 80%avail"
                                     : "expected a number, e.g. 512MiB, 4GiB or 4G");
  const std::string num = s.substr(0, i);
  const std::string unit = trim(std::string_view(s).substr(i));
  char* end = nullptr;
  errno = 0;
  const long double value = std::strtold(num.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(static_cast<double>(value)))
    bad_value(what, text, "malformed number");
  size_spec out;
  // "%" of the device total; "%avail" of the available memory (Note [Limits
  // of available memory]); a blank between them is allowed ("80% avail").
  if (!unit.empty() && unit[0] == '%') {
    const bool avail = unit.size() > 1 && iequals(trim(std::string_view(unit).substr(1)), "avail");
    if (!percent_ok) bad_value(what, text, "must be bytes, not a percentage");
    if (unit != "%" && !avail) bad_value(what, text, "unknown percentage; use 80% (of the device) or 80%avail");
    if (value <= 0 || value > 100) bad_value(what, text, "a percentage must be in (0, 100]");
    out.percent = static_cast<double>(value);
    out.of_available = avail;
    return out;
  }
  struct suffix {
    const char* name;
    long double mult;
  };
  // Note [Sizes are binary]: MB is MiB, as the C API has always read it, so
  // "1GB" is one size at every entry point (the Python binding once read it
  // as 10^9).
  static const suffix table[] = {{"", 1},          {"B", 1},          {"K", 1024.0L},   {"KB", 1024.0L},
                                 {"KiB", 1024.0L}, {"M", 1048576.0L}, {"MB", 1048576.0L}, {"MiB", 1048576.0L},
                                 {"G", 1073741824.0L}, {"GB", 1073741824.0L}, {"GiB", 1073741824.0L},
                                 {"T", 1099511627776.0L}, {"TB", 1099511627776.0L}, {"TiB", 1099511627776.0L}};
  long double mult = 0;
  for (const auto& sfx : table)
    if (iequals(unit, sfx.name)) mult = sfx.mult;
  if (mult == 0)
    bad_value(what, text,
              percent_ok ? "unknown unit; use B, KiB, MiB, GiB, TiB (or K, M, G, T), % or %avail"
                         : "unknown unit; use B, KiB, MiB, GiB, TiB (or K, M, G, T)");
  const long double bytes = value * mult;
  if (bytes < 1 && !(allow_zero && bytes == 0)) bad_value(what, text, "a size must be at least 1 byte");
  if (bytes > k_max_size) bad_value(what, text, "size too large");
  out.bytes = static_cast<std::size_t>(bytes);
  return out;
}

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
  return parse_size_text(text, what, true, false);
}

std::size_t parse_bytes(std::string_view text, std::string_view what, std::size_t min, std::size_t max) {
  const std::size_t b = parse_size_text(text, what, false, min == 0).bytes;
  if (b < min || b > max)
    bad_value(what, text, "expected a size in [" + format_bytes(min) + ", " + format_bytes(max) + "]");
  return b;
}

backend_choice parse_backend(std::string_view text, std::string_view what) {
  std::string s = trim(text);
  std::replace(s.begin(), s.end(), '-', '_');
  if (iequals(s, "auto")) return backend_choice::automatic;
  if (iequals(s, "host")) return backend_choice::host;
  if (iequals(s, "cuda") || iequals(s, "cuda_sync")) return backend_choice::cuda;
  if (iequals(s, "cuda_async")) return backend_choice::cuda_async;
  bad_value(what, text, "expected auto, host, cuda (cudaMalloc; alias cuda_sync) or cuda_async (cudaMallocAsync)");
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

std::string parse_policy(std::string_view text, std::string_view what) {
  std::string s = trim(text);
  if (!is_policy_name(s)) bad_value(what, text, "expected " + policy_names_text(", ", " or "));
  return s;
}

bool parse_bool(std::string_view text, std::string_view what) {
  const std::string s = trim(text);
  for (const char* t : {"1", "true", "on", "yes"})
    if (iequals(s, t)) return true;
  for (const char* f : {"0", "false", "off", "no"})
    if (iequals(s, f)) return false;
  bad_value(what, text, "expected 1 or 0 (true/false, on/off, yes/no)");
}

long parse_integer(std::string_view text, std::string_view what, long min, long max) {
  const std::string s = trim(text);
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(s.c_str(), &end, 10);
  const std::string range = "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (s.empty() || *end != '\0' || errno == ERANGE || x < min || x > max) bad_value(what, text, range);
  return x;
}

double parse_fraction(std::string_view text, std::string_view what, double min_exclusive, double max) {
  const std::string s = trim(text);
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  char why[96];
  std::snprintf(why, sizeof why, "expected a number in (%g, %g]", min_exclusive, max);
  if (s.empty() || *end != '\0' || !(x > min_exclusive && x <= max)) bad_value(what, text, why);
  return x;
}

std::vector<int> parse_device_list(std::string_view text, std::string_view what) {
  const std::string all(text);
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= all.size()) {
    const std::size_t comma = std::min(all.find(',', at), all.size());
    const std::string item = trim(std::string_view(all).substr(at, comma - at));
    if (item.empty()) bad_value(what, all, "expected device ordinals separated by commas, e.g. 0,1");
    char* end = nullptr;
    errno = 0;
    const long d = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || d < 0 || d > max_device_ordinal)
      bad_value(what, all, "expected device ordinals in [0, " + std::to_string(max_device_ordinal) + "] separated by commas");
    if (std::find(out.begin(), out.end(), static_cast<int>(d)) != out.end())
      bad_value(what, all, "a device is listed twice");
    out.push_back(static_cast<int>(d));
    at = comma + 1;
  }
  return out;
}

std::string soft_above_hard_message(std::size_t soft, std::size_t hard) {
  return "gcpressure: soft limit above hard limit (soft " + format_bytes(soft) + ", hard " + format_bytes(hard) +
         "); lower the soft limit or raise the hard one";
}

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
