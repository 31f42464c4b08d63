// tests/test_support.hpp — the one header of test helpers (every test
// target, the reliability tests included, and their helper programs):
//
// - misuse_capture: installs a counting misuse handler (keeps stderr quiet,
//   lets a test assert that misuse was reported) and restores the old one.
// - env_guard: saves, clears and restores every GCPRESSURE_* variable.
// - watchdog / run_with_watchdog: if a scope (a body) does not finish in time
//   the process exits 124 with a clear message instead of hanging ctest.
// - clear_stack / settle: exact accounting under a conservative collector.
// - json_check: a small strict JSON syntax checker that collects object keys.
// - expect_rejected: the call must throw one of the library's exception types.
// - KiB / MiB / GiB, host_opts (host-backend allocator options), cuda_stream.
// The Boehm half (gc.h, boehm::init, settling a heap) is
// tests/boehm_test_support.hpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <typeinfo>

#include "gcpressure/config.hpp"
#include <utility>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

namespace gcp_test {

// Allocator options over the host backend: `capacity` bytes of "device",
// a hard limit, and a soft limit when `soft` is non-zero.
inline gcpressure::allocator_options host_opts(std::size_t hard, std::size_t soft = 0,
                                               std::size_t capacity = std::size_t{1} << 30) {
  gcpressure::allocator_options o;
  o.backend = gcpressure::backend_kind::host;
  o.host_capacity = capacity;
  o.hard_limit.bytes = hard;
  if (soft) o.soft_limit.bytes = soft;
  return o;
}

// A CUDA stream for the test's scope (the GPU tests; throws without CUDA).
struct cuda_stream {
  gcpressure::stream_ref s = gcpressure::cuda_stream_create();
  cuda_stream() = default;
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  ~cuda_stream() { gcpressure::cuda_stream_destroy(s); }
};

// How many of the `bytes` device bytes at `p` differ from `value` (copied to
// the host on stream `s`).
inline std::size_t count_not(const void* p, std::size_t bytes, unsigned char value, gcpressure::stream_ref s) {
  std::vector<unsigned char> host(bytes);
  gcpressure::cuda_memcpy_to_host(host.data(), p, bytes, s);
  std::size_t bad = 0;
  for (unsigned char c : host) bad += c != value;
  return bad;
}

// ---------------------------------------------------------------------------
// Misuse handler capture.
class misuse_capture {
 public:
  misuse_capture() {
    count_.store(0);
    {
      std::lock_guard<std::mutex> lk(mu());
      last_().clear();
    }
    old_ = gcpressure::set_misuse_handler(&handler);
  }
  ~misuse_capture() { gcpressure::set_misuse_handler(old_); }
  misuse_capture(const misuse_capture&) = delete;
  misuse_capture& operator=(const misuse_capture&) = delete;

  int count() const { return count_.load(); }
  void reset() { count_.store(0); }
  std::string last() const {
    std::lock_guard<std::mutex> lk(mu());
    return last_();
  }

 private:
  static void handler(const char* msg) {
    count_.fetch_add(1);
    std::lock_guard<std::mutex> lk(mu());
    last_() = msg ? msg : "";
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::string& last_() {
    static std::string s;
    return s;
  }
  static inline std::atomic<int> count_{0};
  gcpressure::misuse_handler old_ = nullptr;
};

// ---------------------------------------------------------------------------
// Environment guard: every GCPRESSURE_* variable the library reads (the
// options table is the one list).
inline const std::vector<std::string>& gcpressure_env_vars() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> names;
    for (const gcpressure::option_info* o = gcpressure::options_table(); o->env; ++o) names.push_back(o->env);
    return names;
  }();
  return v;
}

class env_guard {
 public:
  env_guard() {
    for (const auto& name : gcpressure_env_vars()) {
      const char* v = std::getenv(name.c_str());
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name.c_str());
    }
  }
  ~env_guard() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  env_guard(const env_guard&) = delete;
  env_guard& operator=(const env_guard&) = delete;

  void set(const char* name, const char* value) { ASSERT_EQ(::setenv(name, value, 1), 0); }
  void unset(const char* name) { ::unsetenv(name); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// ---------------------------------------------------------------------------
// Fails the process (exit 124, naming what it was doing and the last progress
// note) if not destroyed within `limit`: a deadlock reports itself.
class watchdog {
 public:
  watchdog(std::chrono::seconds limit, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
        std::fprintf(stderr,
                     "\n[  FAILED  ] WATCHDOG: '%s' did not finish within %lld s (deadlock or livelock?); "
                     "last progress note: %s\n",
                     what_.c_str(), static_cast<long long>(limit.count()), note_.c_str());
        std::fflush(stderr);
        std::fflush(stdout);
        std::_Exit(124);
      }
    });
  }
  ~watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  // A line printed if the watchdog fires.
  void note(std::string s) {
    std::lock_guard<std::mutex> lk(mu_);
    note_ = std::move(s);
  }

 private:
  std::string what_, note_ = "(none)";
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------------------
// Exact accounting under a conservative collector (Boehm scans stacks and
// registers: a stale copy of a handle in a dead stack slot keeps it alive).
// clear_stack() overwrites the dead stack below its caller; call it from the
// level the collection is called from, right after the helper that held
// handles returned (a helper cannot clear its own frame). See Note [Exact
// accounting under a conservative collector] in tests/test_boehm.cpp and
// Note [Lost or retained] in tests/reliability/gc_roots.hpp.
//
// Not instrumented by AddressSanitizer: an instrumented frame puts a redzone
// between its buffer and its caller that nothing writes, so the words right
// below the caller's frame -- where the returned helper kept its locals --
// stayed dirty under ASan, and a dropped handle there stayed marked.
// Uninstrumented, the buffer reaches the saved frame pointer. Plain stores, no
// memset: ASan's memset checks the range against the stack's shadow.
[[gnu::noinline, gnu::no_sanitize_address]] inline void clear_stack() {
  volatile std::uintptr_t buf[256 * 1024 / sizeof(std::uintptr_t)];
  for (auto& w : buf) w = 0;
}

// Polls `done` for up to `limit`, calling `step` (run finalizers, drain)
// before each check. True once `done`.
template <class Step, class Done>
bool settle(Step&& step, Done&& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    step();
    if (done()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---------------------------------------------------------------------------
// Watchdog around a body. std::async's future blocks in its destructor, so a hung body would
// hang the test anyway; instead the body runs on a detached thread and on
// timeout the process exits non-zero (ctest reports the test as failed).
template <class F>
void run_with_watchdog(std::chrono::seconds limit, const char* what, F&& body) {
  auto task = std::make_shared<std::packaged_task<void()>>(std::forward<F>(body));
  std::future<void> done = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr,
                 "\n[  FAILED  ] WATCHDOG: '%s' did not finish within %lld s "
                 "(deadlock or livelock?) — exiting instead of hanging\n",
                 what, static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(124);
  }
  done.get();  // rethrows an exception that escaped the body
}

// ---------------------------------------------------------------------------
// Strict JSON syntax check (RFC 8259 grammar, no extensions).
class json_check {
 public:
  explicit json_check(std::string text) : s_(std::move(text)) {}

  // True if the whole text is exactly one JSON value (surrounding whitespace ok).
  bool valid() {
    pos_ = 0;
    keys_.clear();
    error_.clear();
    ws();
    if (!value(0)) return false;
    ws();
    if (pos_ != s_.size()) return fail("trailing characters");
    return true;
  }
  const std::set<std::string>& keys() const { return keys_; }
  std::string error() const { return error_ + " at offset " + std::to_string(pos_); }

 private:
  bool fail(const char* why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  void ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t'))
      ++pos_;
  }
  bool lit(const char* w) {
    const std::size_t n = std::strlen(w);
    if (s_.compare(pos_, n, w) != 0) return fail("bad literal");
    pos_ += n;
    return true;
  }
  bool value(int depth) {
    if (depth > 64) return fail("too deep");
    if (pos_ >= s_.size()) return fail("unexpected end");
    switch (s_[pos_]) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': {
        std::string ignored;
        return string(ignored);
      }
      case 't': return lit("true");
      case 'f': return lit("false");
      case 'n': return lit("null");
      default: return number();
    }
  }
  // One comma-separated sequence after its opening bracket, up to `close`;
  // `element` parses one member (object) or element (array).
  template <class Element>
  bool sequence(char close, Element&& element) {
    ++pos_;  // the opening bracket
    ws();
    if (eat(close)) return true;
    for (;;) {
      ws();
      if (!element()) return false;
      ws();
      if (eat(',')) continue;
      if (eat(close)) return true;
      return fail(close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  bool eat(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool object(int depth) {
    return sequence('}', [&] {
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected key");
      std::string key;
      if (!string(key)) return false;
      keys_.insert(key);
      ws();
      if (!eat(':')) return fail("expected ':'");
      ws();
      return value(depth + 1);
    });
  }
  bool array(int depth) {
    return sequence(']', [&] { return value(depth + 1); });
  }
  bool string(std::string& out) {
    ++pos_;  // "
    while (pos_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return fail("control character in string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) return fail("bad escape");
        const char e = s_[pos_];
        if (e == 'u') {
          for (int i = 1; i <= 4; ++i)
            if (pos_ + i >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_ + i])))
              return fail("bad \\u escape");
          pos_ += 5;
          out += '?';
          continue;
        }
        if (!std::strchr("\"\\/bfnrt", e)) return fail("bad escape");
        out += e;
        ++pos_;
        continue;
      }
      out += static_cast<char>(c);
      ++pos_;
    }
    return fail("unterminated string");
  }
  bool number() {
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) return fail("bad number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) return fail("bad fraction");
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) return fail("bad exponent");
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    return pos_ > start;
  }

  std::string s_;
  std::size_t pos_ = 0;
  std::set<std::string> keys_;
  std::string error_;
};

// ---------------------------------------------------------------------------
// The call must be rejected with one of the library's exception types:
// gcpressure::out_of_memory (a std::bad_alloc) or gcpressure::logic_error (a
// std::logic_error). Anything else — another exception type or a returned
// pointer — is a failure. Returns a short name of what was caught.
template <class F>
std::string expect_rejected(F&& f, const std::string& context) {
  try {
    void* p = f();
    ADD_FAILURE() << context << ": expected out_of_memory or logic_error, got pointer " << p;
    return "none";
  } catch (const gcpressure::out_of_memory& e) {
    static_assert(std::is_base_of_v<std::bad_alloc, gcpressure::out_of_memory>);
    EXPECT_NE(std::string(e.what()), "") << context;
    return "out_of_memory";
  } catch (const gcpressure::logic_error& e) {
    static_assert(std::is_base_of_v<std::logic_error, gcpressure::logic_error>);
    EXPECT_NE(std::string(e.what()), "") << context;
    return "logic_error";
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": unexpected exception type " << typeid(e).name() << ": " << e.what();
    return "other";
  } catch (...) {
    ADD_FAILURE() << context << ": unexpected non-std exception";
    return "other";
  }
}

// Whether [a, a + an) and [b, b + bn) share a byte.
inline bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + bn && y < x + an;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

inline std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Fills [p, p+n) with a pattern derived from `seed`; check_pattern verifies it.
inline void fill_pattern(void* p, std::size_t n, std::uint32_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((seed * 2654435761u + i * 31u) >> 7);
}
inline bool check_pattern(const void* p, std::size_t n, std::uint32_t seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<unsigned char>((seed * 2654435761u + i * 31u) >> 7)) return false;
  return true;
}

// Cheap tags at both ends of a block (detects overlapping blocks).
inline void put_tags(void* p, std::size_t n, std::uint64_t tag) {
  std::memcpy(p, &tag, std::min<std::size_t>(n, sizeof tag));
  if (n >= 2 * sizeof tag) std::memcpy(static_cast<char*>(p) + n - sizeof tag, &tag, sizeof tag);
}
inline bool tags_ok(const void* p, std::size_t n, std::uint64_t tag) {
  std::uint64_t a = 0, b = tag;
  std::memcpy(&a, p, std::min<std::size_t>(n, sizeof tag));
  if (n >= 2 * sizeof tag) std::memcpy(&b, static_cast<const char*>(p) + n - sizeof tag, sizeof tag);
  if (n < sizeof tag) {
    std::uint64_t t = 0;
    std::memcpy(&t, &tag, n);
    return a == t;
  }
  return a == tag && b == tag;
}

}  // namespace gcp_test
