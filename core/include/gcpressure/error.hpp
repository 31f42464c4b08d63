// gcpressure/error.hpp — the library's exception types.
//
// Note [Errors]
// - out_of_memory: an allocation could not be satisfied after the reclaim
//   ladder ran. Derives from std::bad_alloc so that code written for any
//   allocator catches it. Its message is built by the allocator and names the
//   request, live/cached/reserved bytes, both limits, device free/total and
//   every reclaim step tried.
// - logic_error: misuse (zero-size request, double free, foreign pointer,
//   use after shutdown, bad configuration).
// - cuda_error: a CUDA runtime call failed; carries file:line.
// Messages carry no absolute paths (Note [No absolute paths in messages]);
// a configuration error names the variable or option and the value only.
// Frees and destructors never throw: see Note [Misuse in noexcept paths].
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gcpressure {

class out_of_memory : public std::bad_alloc {
 public:
  explicit out_of_memory(std::string msg) : msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

class logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class cuda_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// `file` relative to the source tree (Note [No absolute paths in messages]).
// Thread-safe; finalizer-safe.
std::string_view source_name(std::string_view file) noexcept;
[[noreturn]] void throw_logic_error(const char* file, int line, const std::string& msg);
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* call, int code,
                                   const char* name, const char* text);

// Note [Misuse in noexcept paths]
// deallocate() is noexcept (it runs from finalizer drains and destructors), so
// misuse detected there (double free, foreign pointer, size mismatch) cannot
// throw. It is reported to the misuse handler, which by default writes one
// clear line to stderr; the error is also counted in stats (misuse_errors).
// Checked entry points (device_allocator::free, the C API) detect the same
// misuse first and throw / return a status instead.
void report_misuse(const std::string& msg) noexcept;

// Note [Leaks on purpose]
// Memory that may still be in use when its owner goes (a pool's segments
// under live blocks, a no-pool allocator's live blocks, the C API's
// tombstones) is leaked on purpose and reported (report_misuse). In an
// AddressSanitizer build the owner also tells LeakSanitizer, object by
// object, so that the leak check at exit reports only what nobody meant to
// leak; elsewhere this does nothing. A pointer that is not a malloc'd object
// (real device memory) is ignored by LeakSanitizer.
void leaked_on_purpose(const void* p) noexcept;

// Note [Errors at a C boundary]
// The C API (gc_bridge/src/c_api.cpp) and the PyTorch shim (examples/torch:
// guarded() in torch_state.hpp) let no exception cross their C entry
// points: each becomes a thread-local message and a status. Both classify it
// here, so that one exception reads the same through either: the library's
// out_of_memory / cuda_error / logic_error keep their messages; a host
// std::bad_alloc is an out-of-memory of its own; anything else is internal.
enum class error_class { invalid, out_of_memory, cuda, internal };
struct caught_error {
  error_class kind;
  std::string message;
};
// The exception being handled, classified. Only from inside a catch handler.
// Thread-safe; finalizer-safe.
caught_error classify_current_exception() noexcept;

// f(), or on_error(classify_current_exception()) if f throws: the body of a
// C entry point. Thread-safe as f and on_error are.
template <class F, class OnError>
auto call_at_c_boundary(F&& f, OnError&& on_error) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return on_error(classify_current_exception());
  }
}
}  // namespace detail

using misuse_handler = void (*)(const char* message);
// Installs the handler for misuse detected in noexcept paths; returns the old
// one. nullptr restores the default (stderr). Thread-safe.
misuse_handler set_misuse_handler(misuse_handler h) noexcept;

}  // namespace gcpressure

#define GCPRESSURE_FAIL(msg) ::gcpressure::detail::throw_logic_error(__FILE__, __LINE__, (msg))
#define GCPRESSURE_EXPECTS(cond, msg)                                     \
  do {                                                                    \
    if (!(cond)) ::gcpressure::detail::throw_logic_error(__FILE__, __LINE__, (msg)); \
  } while (0)
