// Errors and misuse: the precondition failures (throw_logic_error, with the
// source position), the process-wide misuse handler and report_misuse, the
// one exception-to-error mapping of the C boundaries
// (classify_current_exception), and backend names (to_string(backend_kind)).
#include "gcpressure/error.hpp"

#include <atomic>
#include <cstdio>
#include <sstream>

#include "gcpressure/types.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GCPRESSURE_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GCPRESSURE_LSAN)
#define GCPRESSURE_LSAN 1
#endif
#if defined(GCPRESSURE_LSAN)
#include <sanitizer/lsan_interface.h>
#endif

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

// Note [No absolute paths in messages]
// __FILE__ is the compiler's path, absolute under CMake: a user's error
// message would show the build machine's checkout. This file's own __FILE__
// ends in core/src/error.cpp, so what precedes that is the source root; it is
// cut from every library file name. A file outside the tree keeps its name only.
std::string_view source_name(std::string_view file) noexcept {
  constexpr std::string_view self = __FILE__;
  constexpr std::string_view tail = "core/src/error.cpp";
  if (self.size() >= tail.size() && self.substr(self.size() - tail.size()) == tail) {
    const std::string_view root = self.substr(0, self.size() - tail.size());
    if (!root.empty() && file.substr(0, root.size()) == root) return file.substr(root.size());
  }
  const std::size_t slash = file.rfind('/');
  return !file.empty() && file.front() == '/' && slash != std::string_view::npos ? file.substr(slash + 1) : file;
}

void throw_logic_error(const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << "gcpressure: " << msg << " (" << source_name(file) << ":" << line << ")";
  throw logic_error(os.str());
}

void throw_cuda_error(const char* file, int line, const char* call, int code, const char* name,
                      const char* text) {
  std::ostringstream os;
  os << "gcpressure: CUDA error " << code << " (" << (name ? name : "?") << ": " << (text ? text : "?")
     << ") in " << call << " at " << source_name(file) << ":" << line;
  throw cuda_error(os.str());
}

void report_misuse(const std::string& msg) noexcept {
  try {
    g_misuse.load()(msg.c_str());
  } catch (...) {
    // A handler that throws from a noexcept path would terminate; swallow.
  }
}

// Note [Leaks on purpose] (error.hpp).
void leaked_on_purpose([[maybe_unused]] const void* p) noexcept {
#if defined(GCPRESSURE_LSAN)
  if (p) __lsan_ignore_object(p);
#endif
}

caught_error classify_current_exception() noexcept {
  try {
    throw;
  } catch (const out_of_memory& e) {
    return {error_class::out_of_memory, e.what()};
  } catch (const cuda_error& e) {
    return {error_class::cuda, e.what()};
  } catch (const logic_error& e) {
    return {error_class::invalid, e.what()};
  } catch (const std::bad_alloc&) {
    return {error_class::out_of_memory, "gcpressure: out of host memory"};
  } catch (const std::exception& e) {
    return {error_class::internal, e.what()};
  } catch (...) {
    return {error_class::internal, "gcpressure: unknown exception"};
  }
}

}  // namespace detail
}  // namespace gcpressure
