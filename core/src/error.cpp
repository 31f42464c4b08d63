#include "gcpressure/error.hpp"

#include <atomic>
#include <cstdio>
#include <sstream>

#include "gcpressure/types.hpp"

namespace gcpressure {

namespace {
void default_misuse(const char* msg) { std::fprintf(stderr, "gcpressure: %s\n", msg); }
std::atomic<misuse_handler> g_misuse{&default_misuse};
}  // namespace

misuse_handler set_misuse_handler(misuse_handler h) noexcept {
  return g_misuse.exchange(h ? h : &default_misuse);
}

const char* to_string(backend_kind k) noexcept {
  switch (k) {
    case backend_kind::host: return "host";
    case backend_kind::cuda: return "cuda";
    case backend_kind::cuda_async: return "cuda_async";
  }
  return "?";
}

namespace detail {

void throw_logic_error(const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << "gcpressure: " << msg << " (" << file << ":" << line << ")";
  throw logic_error(os.str());
}

void throw_cuda_error(const char* file, int line, const char* call, int code, const char* name,
                      const char* text) {
  std::ostringstream os;
  os << "gcpressure: CUDA error " << code << " (" << (name ? name : "?") << ": " << (text ? text : "?")
     << ") in " << call << " at " << file << ":" << line;
  throw cuda_error(os.str());
}

void report_misuse(const std::string& msg) noexcept {
  try {
    g_misuse.load()(msg.c_str());
  } catch (...) {
    // A handler that throws from a noexcept path would terminate; swallow.
  }
}

}  // namespace detail
}  // namespace gcpressure
