// fuzz_capi.cpp — libFuzzer target over sequences of C-API operations
// (issue 6, docs/RELIABILITY.md "Fuzzing").
//
// Each input is one run: a header picks the hard limit and the policy of a
// fresh Boehm-collected allocator on the host backend; then every byte group
// is one operation: raw alloc, free, misuse (double free, wrong size, interior
// and foreign pointers, null, double unsafe_free, data after free), Boehm
// buffer alloc, unsafe_free, drop handle, collect (minor or full, through the
// policy), a collection the runtime starts itself (GC_gcollect), drain, trim,
// limit change, quiet moment / iteration, stats JSON (also truncated), and an
// exact check. Blocks live on the default stream or one of two host streams,
// whose queued work (simulated kernels) writes and checks the blocks.
//
// Invariants checked after every operation (a violation traps, so libFuzzer
// reports a crash with the input):
//  - every call returns the status the shadow model predicts (OK/OOM where
//    the model cannot know which, OOM only for allocations);
//  - no live block overlaps another (raw blocks, held buffers, and dropped
//    buffers not yet found dead — tracked with Boehm disappearing links, which
//    do not keep them alive);
//  - reserved bytes grow only within the hard limit in force;
//  - the allocator's live bytes lie between the model's sure-live bytes and
//    those plus dropped buffers not yet confirmed finalized; and at each
//    check point (after running pending finalizers and a drain) they are
//    exactly equal, as are live blocks, allocations, frees, misuse errors and
//    OOMs in the stats JSON;
//  - no stream's queued work sees another owner's data; no misuse reported
//    from a noexcept path.
// At the end of an input every block is freed: live = 0, and after trim
// reserved = 0 with the host backend's memory all returned (LeakSanitizer
// sees the rest).
//
// Boehm runs non-incrementally (no mprotect write faults under ASan) and
// without a finalizer thread, so finalizers run only on this thread; its
// static roots are only the handle arrays (LLVMFuzzerInitialize).
#ifndef GC_THREADS
#define GC_THREADS 1
#endif
#include <gc/gc.h>

#include <atomic>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gcpressure/error.hpp"
#include "gcpressure/gcpressure.h"
#include "gcpressure/host_resource.hpp"

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

[[noreturn]] void violated(const char* cond, const char* what = "", const std::string& detail = "") {
  std::fprintf(stderr, "\nfuzz_capi: INVARIANT VIOLATED: %s (%s) %s\n(last error: %s)\n", what, cond,
               detail.c_str(), gcpressure_last_error());
  std::fflush(stderr);
  __builtin_trap();
}
#define REQUIRE(cond, ...)                          \
  do {                                              \
    if (!(cond)) violated(#cond, ##__VA_ARGS__);    \
  } while (0)

std::string num(std::uint64_t v) { return std::to_string(v); }

// --- input reader: bytes from the front, zeros when exhausted -------------------------

struct reader {
  const std::uint8_t* p;
  std::size_t n;
  bool empty() const { return n == 0; }
  std::uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
};

// --- process-wide state (created once) --------------------------------------------------

gcpressure::host_stream* g_streams[2];
std::atomic<int> g_stream_failures{0};
std::atomic<int> g_misuse_reports{0};
std::vector<gcpressure_allocator*>* g_tombstones;  // destroyed handles: kept reachable (documented shells)

void on_misuse(const char* msg) {
  g_misuse_reports.fetch_add(1);
  std::fprintf(stderr, "fuzz_capi: misuse reported from a noexcept path: %s\n", msg);
}

// GC roots: the handles the "runtime" holds (data segment: scanned by Boehm).
constexpr int k_held = 64;
gcpressure_buffer* g_held[k_held];
gcpressure_buffer* g_freed_handles[16];  // unsafe_free'd, kept reachable for double-free checks

// --- the shadow model -------------------------------------------------------------------

struct raw_block {
  void* p;
  std::size_t n;
  int stream;
  std::uint64_t tag;
};
struct held_info {
  void* data;
  std::size_t n;
  int stream;
  std::uint64_t tag;
};
// A dropped handle: the link is cleared by Boehm once the handle is found
// unreachable (before its finalizer runs); the link lives in malloc memory,
// which Boehm does not scan, so it does not keep the handle alive.
struct dropped {
  GC_hidden_pointer link;
  void* data;
  std::size_t n;
  bool in_map;
};

struct model {
  gcpressure_allocator* a = nullptr;
  std::vector<raw_block> raw;
  held_info held[k_held] = {};
  std::vector<std::unique_ptr<dropped>> drops;
  std::vector<void*> freed_raw;  // pointers freed earlier (for double-free attempts)
  std::map<std::uintptr_t, std::size_t> live_map;  // every block known to be live
  std::uint64_t next_tag = 1;
  std::uint64_t allocations = 0, frees = 0, misuse = 0, ooms = 0, finalized = 0;
  std::size_t hard = 0, soft = 0;

  std::size_t sure_live() const {
    std::size_t s = 0;
    for (const auto& r : raw) s += r.n;
    for (const auto& h : held)
      if (h.data) s += h.n;
    for (const auto& d : drops)
      if (d->link) s += d->n;
    return s;
  }
  std::size_t maybe_live() const {
    std::size_t s = sure_live();
    for (const auto& d : drops)
      if (!d->link) s += d->n;
    return s;
  }
  std::size_t sure_blocks() const {
    std::size_t s = raw.size();
    for (const auto& h : held) s += h.data != nullptr;
    for (const auto& d : drops) s += d->link != 0;
    return s;
  }
};

void* stream_ref(int s) { return s == 0 ? nullptr : g_streams[s - 1]->ref(); }

// Simulated kernels (Note in tests/reliability/test_fault_injection.cpp): the
// stream's work writes the tag, and at the free checks it and then poisons.
void put_tag(void* p, std::size_t n, std::uint64_t tag) {
  std::memcpy(p, &tag, n < 8 ? n : 8);
  if (n >= 16) std::memcpy(static_cast<char*>(p) + n - 8, &tag, 8);
}
bool tag_ok(const void* p, std::size_t n, std::uint64_t tag) {
  std::uint64_t a = 0, t = 0;
  std::memcpy(&a, p, n < 8 ? n : 8);
  std::memcpy(&t, &tag, n < 8 ? n : 8);
  if (a != t) return false;
  if (n < 16) return true;
  std::memcpy(&a, static_cast<const char*>(p) + n - 8, 8);
  return a == tag;
}
void write_tag(int s, void* p, std::size_t n, std::uint64_t tag) {
  if (s == 0) return put_tag(p, n, tag);
  g_streams[s - 1]->enqueue([p, n, tag] { put_tag(p, n, tag); });
}
void check_then_poison(int s, const void* p, std::size_t n, std::uint64_t tag) {
  if (s == 0) {
    REQUIRE(tag_ok(p, n, tag), "a live block's contents changed");
    return;
  }
  auto* q = const_cast<void*>(p);
  g_streams[s - 1]->enqueue([q, n, tag] {
    if (!tag_ok(q, n, tag)) g_stream_failures.fetch_add(1);
    put_tag(q, n, 0xDEADBEEFDEADBEEFULL);
  });
}
void sync_streams() {
  for (auto* s : g_streams) s->synchronize();
  REQUIRE(g_stream_failures.load() == 0, "a stream's queued work met another owner's data");
}

// Drops interval-map entries of dropped buffers found dead (their memory may
// be reused from now on).
void sweep_dead_drops(model& m) {
  for (auto& d : m.drops)
    if (!d->link && d->in_map) {
      m.live_map.erase(reinterpret_cast<std::uintptr_t>(d->data));
      d->in_map = false;
    }
}

void add_live(model& m, void* p, std::size_t n) {
  sweep_dead_drops(m);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  REQUIRE(p != nullptr, "OK with a null pointer");
  REQUIRE(a % 256 == 0, "block not 256-aligned");
  auto next = m.live_map.lower_bound(a);
  if (next != m.live_map.end()) REQUIRE(next->first >= a + n, "new block overlaps a live block");
  if (next != m.live_map.begin()) {
    auto prev = std::prev(next);
    REQUIRE(prev->first + prev->second <= a, "new block overlaps a live block");
  }
  m.live_map.emplace(a, n);
}
void remove_live(model& m, void* p) { m.live_map.erase(reinterpret_cast<std::uintptr_t>(p)); }

// --- reading the stats JSON ----------------------------------------------------------------

std::string stats_json(gcpressure_allocator* a) {
  std::size_t need = 0;
  REQUIRE(gcpressure_stats_json(a, nullptr, 0, &need) == GCPRESSURE_ERR_TRUNCATED);
  std::string buf(need, '\0');
  std::size_t need2 = 0;
  REQUIRE(gcpressure_stats_json(a, buf.data(), buf.size(), &need2) == GCPRESSURE_OK);
  REQUIRE(need2 == need);
  REQUIRE(buf[need - 1] == '\0' && std::strlen(buf.c_str()) == need - 1);
  buf.resize(need - 1);
  return buf;
}
// The number after "key": (first occurrence at or after `from`).
std::int64_t json_number(const std::string& j, const char* key, std::size_t from = 0) {
  const std::string k = std::string("\"") + key + "\":";
  const auto at = j.find(k, from);
  REQUIRE(at != std::string::npos, "stats JSON lacks a key", key);
  return std::strtoll(j.c_str() + at + k.size(), nullptr, 10);
}
std::int64_t json_current(const std::string& j, const char* stat) {
  const std::string k = std::string("\"") + stat + "\":{";
  const auto at = j.find(k);
  REQUIRE(at != std::string::npos, "stats JSON lacks a stat", stat);
  return json_number(j, "current", at);
}

// --- checks --------------------------------------------------------------------------------

std::size_t usage_live(gcpressure_allocator* a, std::size_t* reserved = nullptr) {
  std::size_t live = 0, res = 0;
  REQUIRE(gcpressure_usage(a, &live, &res) == GCPRESSURE_OK);
  if (reserved) *reserved = res;
  return live;
}

void bounds_check(model& m) {
  const std::size_t live = usage_live(m.a);
  REQUIRE(live >= m.sure_live(), "live below the model's sure-live bytes", num(live) + " < " + num(m.sure_live()));
  REQUIRE(live <= m.maybe_live(), "live above the model's bytes", num(live) + " > " + num(m.maybe_live()));
  REQUIRE(g_misuse_reports.load() == 0, "misuse reported from a noexcept path");
}

// Runs pending finalizers and a drain, then everything must match exactly.
void exact_check(model& m) {
  while (GC_should_invoke_finalizers()) GC_invoke_finalizers();
  REQUIRE(gcpressure_drain(m.a) == GCPRESSURE_OK);
  for (auto it = m.drops.begin(); it != m.drops.end();) {
    if (!(*it)->link) {
      if ((*it)->in_map) remove_live(m, (*it)->data);
      ++m.finalized;
      it = m.drops.erase(it);
    } else {
      ++it;
    }
  }
  const std::size_t live = usage_live(m.a);
  REQUIRE(live == m.sure_live(), "live bytes differ from the model", num(live) + " vs " + num(m.sure_live()));
  const std::string j = stats_json(m.a);
  REQUIRE(json_current(j, "requested") == static_cast<std::int64_t>(live), "JSON requested vs usage", j);
  REQUIRE(json_current(j, "blocks") == static_cast<std::int64_t>(m.sure_blocks()), "JSON live blocks vs model", j);
  REQUIRE(json_number(j, "allocations") == static_cast<std::int64_t>(m.allocations), "JSON allocations", j);
  REQUIRE(json_number(j, "frees") == static_cast<std::int64_t>(m.frees + m.finalized), "JSON frees", j);
  REQUIRE(json_number(j, "misuse_errors") == static_cast<std::int64_t>(m.misuse), "JSON misuse_errors", j);
  REQUIRE(json_number(j, "ooms") == static_cast<std::int64_t>(m.ooms), "JSON ooms", j);
  REQUIRE(json_number(j, "deferred_pending") == 0, "JSON deferred_pending", j);
  REQUIRE(json_number(j, "hard_limit") == static_cast<std::int64_t>(m.hard), "JSON hard_limit", j);
  sync_streams();
}

// --- operations ----------------------------------------------------------------------------

std::size_t pick_size(reader& r) {
  static constexpr std::size_t edges[] = {0,
                                          1,
                                          255,
                                          256,
                                          257,
                                          511,
                                          512,
                                          513,
                                          1 * MiB - 1,
                                          1 * MiB,
                                          1 * MiB + 1,
                                          2 * MiB,
                                          10 * MiB,
                                          10 * MiB + 1,
                                          20 * MiB + 1,
                                          std::size_t{1} << 47,
                                          (std::size_t{1} << 48) + 1,
                                          SIZE_MAX};
  const std::uint8_t cls = r.u8();
  const std::uint16_t v = r.u16();
  switch (cls % 4) {
    case 0: return 1 + v % 4096;
    case 1: return static_cast<std::size_t>(v) * 64 + 1;  // to 4 MiB
    case 2: return static_cast<std::size_t>(v) * 128;     // to 8 MiB; 0 possible
    default: return edges[v % (sizeof edges / sizeof edges[0])];
  }
}

// Reserved bytes may only grow within the hard limit in force.
struct reserve_guard {
  model& m;
  std::size_t before;
  explicit reserve_guard(model& mm) : m(mm) { usage_live(m.a, &before); }
  ~reserve_guard() {
    std::size_t after = 0;
    usage_live(m.a, &after);
    if (after > before) REQUIRE(after <= m.hard, "reserved grew past the hard limit", num(after) + " > " + num(m.hard));
  }
};

void op_alloc(model& m, reader& r) {
  const std::size_t n = pick_size(r);
  const int s = r.u8() % 3;
  if (m.raw.size() >= 64) return;
  reserve_guard g(m);
  void* p = reinterpret_cast<void*>(1);
  const gcpressure_status st = gcpressure_alloc(m.a, n, stream_ref(s), &p);
  if (n == 0) {
    REQUIRE(st == GCPRESSURE_ERR_INVALID && p == nullptr, "zero-byte alloc");
    return;
  }
  if (st == GCPRESSURE_ERR_OOM) {
    REQUIRE(p == nullptr, "OOM with a pointer");
    REQUIRE(std::strstr(gcpressure_last_error(), "out of memory") != nullptr, "OOM message", gcpressure_last_error());
    ++m.ooms;
    return;
  }
  REQUIRE(st == GCPRESSURE_OK, "alloc status", num(st));
  ++m.allocations;
  add_live(m, p, n);
  const std::uint64_t tag = m.next_tag++;
  write_tag(s, p, n, tag);
  m.raw.push_back({p, n, s, tag});
}

void op_free(model& m, reader& r) {
  const std::uint8_t i = r.u8();
  const int s_override = r.u8() % 4;  // 3: the allocation's own stream
  if (m.raw.empty()) return;
  const raw_block b = m.raw[i % m.raw.size()];
  m.raw[i % m.raw.size()] = m.raw.back();
  m.raw.pop_back();
  // Work is ordered on the block's stream; free on it (or, for default-stream
  // blocks, on any stream: the host work is already done).
  const int s = (b.stream == 0 && s_override < 3) ? s_override : b.stream;
  check_then_poison(b.stream, b.p, b.n, b.tag);
  REQUIRE(gcpressure_free(m.a, b.p, b.n, stream_ref(s)) == GCPRESSURE_OK, "free of a live block");
  remove_live(m, b.p);
  ++m.frees;
  if (m.freed_raw.size() < 64) m.freed_raw.push_back(b.p);
}

bool is_live_start(const model& m, const void* p) {
  return m.live_map.count(reinterpret_cast<std::uintptr_t>(p)) != 0;
}

void op_misuse(model& m, reader& r) {
  const std::uint8_t kind = r.u8();
  const std::uint8_t i = r.u8();
  switch (kind % 8) {
    case 0: {  // double free (a pointer freed earlier and not live again)
      if (m.freed_raw.empty()) return;
      void* p = m.freed_raw[i % m.freed_raw.size()];
      sweep_dead_drops(m);
      if (is_live_start(m, p)) return;
      // A dropped buffer whose link cleared may still be live in the
      // allocator (not drained yet): a free would be a real one. Skip those.
      for (const auto& d : m.drops)
        if (d->data == p) return;
      REQUIRE(gcpressure_free(m.a, p, 256, nullptr) == GCPRESSURE_ERR_MISUSE, "double free");
      ++m.misuse;
      return;
    }
    case 1: {  // wrong size
      if (m.raw.empty()) return;
      const raw_block& b = m.raw[i % m.raw.size()];
      REQUIRE(gcpressure_free(m.a, b.p, b.n + 1, nullptr) == GCPRESSURE_ERR_MISUSE, "size mismatch");
      ++m.misuse;
      return;
    }
    case 2: {  // interior pointer
      if (m.raw.empty()) return;
      const raw_block& b = m.raw[i % m.raw.size()];
      void* q = static_cast<char*>(b.p) + 1 + i % 255;
      REQUIRE(gcpressure_free(m.a, q, b.n, nullptr) == GCPRESSURE_ERR_MISUSE, "interior pointer");
      ++m.misuse;
      return;
    }
    case 3: {  // foreign pointer
      static char foreign[512];
      REQUIRE(gcpressure_free(m.a, foreign, 512, nullptr) == GCPRESSURE_ERR_MISUSE, "foreign pointer");
      ++m.misuse;
      return;
    }
    case 4:  // null pointer / null outputs
      REQUIRE(gcpressure_free(m.a, nullptr, 1, nullptr) == GCPRESSURE_ERR_INVALID);
      REQUIRE(gcpressure_alloc(m.a, 1, nullptr, nullptr) == GCPRESSURE_ERR_INVALID);
      REQUIRE(gcpressure_boehm_alloc(m.a, 1, nullptr, nullptr) == GCPRESSURE_ERR_INVALID);
      REQUIRE(gcpressure_buffer_unsafe_free(m.a, nullptr) == GCPRESSURE_ERR_INVALID);
      return;
    case 5: {  // double unsafe_free, data after unsafe_free
      gcpressure_buffer* b = g_freed_handles[i % 16];
      if (!b) return;
      void* d = reinterpret_cast<void*>(1);
      REQUIRE(gcpressure_buffer_data(b, &d) == GCPRESSURE_ERR_MISUSE && d == nullptr, "data after unsafe_free");
      REQUIRE(gcpressure_buffer_unsafe_free(m.a, b) == GCPRESSURE_ERR_MISUSE, "double unsafe_free");
      return;
    }
    case 6: {  // set_limits with soft above hard
      const std::size_t hard = m.hard;
      REQUIRE(gcpressure_set_limits(m.a, hard + 256, hard) == GCPRESSURE_ERR_INVALID, "soft above hard");
      return;
    }
    default: {  // release_from_finalizer misuse: null pointer
      REQUIRE(gcpressure_release_from_finalizer(m.a, nullptr, 1, nullptr) == GCPRESSURE_ERR_INVALID);
      return;
    }
  }
}

void op_boehm_alloc(model& m, reader& r) {
  const std::size_t n = pick_size(r);
  const int s = r.u8() % 3;
  const int slot = r.u8() % k_held;
  if (g_held[slot]) return;  // the slot is in use: no-op (drop first)
  reserve_guard g(m);
  gcpressure_buffer* b = nullptr;
  const gcpressure_status st = gcpressure_boehm_alloc(m.a, n, stream_ref(s), &b);
  if (n == 0) {
    REQUIRE(st == GCPRESSURE_ERR_INVALID && b == nullptr, "zero-byte boehm alloc");
    return;
  }
  if (st == GCPRESSURE_ERR_OOM) {
    REQUIRE(b == nullptr);
    ++m.ooms;
    return;
  }
  REQUIRE(st == GCPRESSURE_OK, "boehm alloc status", num(st));
  REQUIRE(gcpressure_buffer_size(b) == n, "buffer size");
  void* d = nullptr;
  REQUIRE(gcpressure_buffer_data(b, &d) == GCPRESSURE_OK && d != nullptr, "buffer data");
  ++m.allocations;
  g_held[slot] = b;
  add_live(m, d, n);
  const std::uint64_t tag = m.next_tag++;
  write_tag(s, d, n, tag);
  m.held[slot] = {d, n, s, tag};
}

void op_unsafe_free(model& m, reader& r) {
  const int slot = r.u8() % k_held;
  gcpressure_buffer* b = g_held[slot];
  if (!b) return;
  const held_info h = m.held[slot];
  check_then_poison(h.stream, h.data, h.n, h.tag);
  REQUIRE(gcpressure_buffer_unsafe_free(m.a, b) == GCPRESSURE_OK, "unsafe_free");
  remove_live(m, h.data);
  ++m.frees;
  g_freed_handles[slot % 16] = b;  // kept reachable: never reused while we may poke it
  g_held[slot] = nullptr;
  m.held[slot] = {};
}

[[gnu::noinline]] void op_drop(model& m, reader& r) {
  const int slot = r.u8() % k_held;
  gcpressure_buffer* b = g_held[slot];
  if (!b || m.drops.size() >= 256) return;
  const held_info h = m.held[slot];
  check_then_poison(h.stream, h.data, h.n, h.tag);
  auto d = std::make_unique<dropped>();
  d->link = GC_HIDE_POINTER(b);
  d->data = h.data;
  d->n = h.n;
  d->in_map = true;
  REQUIRE(GC_general_register_disappearing_link(reinterpret_cast<void**>(&d->link), b) == GC_SUCCESS);
  m.drops.push_back(std::move(d));
  g_held[slot] = nullptr;
  m.held[slot] = {};
}

void op_limits(model& m, reader& r) {
  static constexpr std::size_t hards[] = {0, 1 * MiB, 4 * MiB, 16 * MiB, 32 * MiB, 48 * MiB, 64 * MiB, 3 * MiB + 256};
  const std::size_t hard = hards[r.u8() % 8];
  const std::uint8_t soft_pct = r.u8();  // 0: unchanged; else % of the new hard limit
  const std::size_t eff_hard = hard ? hard : m.hard;
  const std::size_t soft = soft_pct ? eff_hard / 100 * (soft_pct % 100 + 1) : 0;
  REQUIRE(gcpressure_set_limits(m.a, soft, hard) == GCPRESSURE_OK, "set_limits");
  m.hard = eff_hard;
  const std::string j = stats_json(m.a);
  REQUIRE(json_number(j, "hard_limit") == static_cast<std::int64_t>(m.hard));
  REQUIRE(json_number(j, "soft_limit") <= static_cast<std::int64_t>(m.hard), "soft limit above hard after set_limits", j);
}

[[gnu::noinline]] void clear_stack() {
  volatile char buf[16 * 1024];
  std::memset(const_cast<char*>(buf), 0, sizeof buf);
  asm volatile("" ::: "memory");
}

// Frees everything, checks live = 0 and (after trim) reserved = 0, destroys.
void finish(model& m) {
  sync_streams();
  for (const auto& b : m.raw) {
    REQUIRE(tag_ok(b.p, b.n, b.tag), "a live block's contents changed");
    REQUIRE(gcpressure_free(m.a, b.p, b.n, nullptr) == GCPRESSURE_OK);
    ++m.frees;
  }
  m.raw.clear();
  for (int i = 0; i < k_held; ++i) {
    if (!g_held[i]) continue;
    REQUIRE(tag_ok(m.held[i].data, m.held[i].n, m.held[i].tag), "a held buffer's contents changed");
    REQUIRE(gcpressure_buffer_unsafe_free(m.a, g_held[i]) == GCPRESSURE_OK);
    ++m.frees;
    g_held[i] = nullptr;
    m.held[i] = {};
  }
  // Dropped buffers a conservative scan still keeps: free them by hand (the
  // link still names a live handle, so it is safe to use).
  exact_check(m);
  for (auto& d : m.drops) {
    auto* b = static_cast<gcpressure_buffer*>(GC_REVEAL_POINTER(d->link));
    GC_unregister_disappearing_link(reinterpret_cast<void**>(&d->link));
    d->link = 0;
    REQUIRE(gcpressure_buffer_unsafe_free(m.a, b) == GCPRESSURE_OK, "unsafe_free of a dropped, still live handle");
    ++m.frees;
  }
  m.drops.clear();
  for (auto& f : g_freed_handles) f = nullptr;
  exact_check(m);
  REQUIRE(usage_live(m.a) == 0, "live bytes after freeing everything");
  REQUIRE(gcpressure_trim(m.a) == GCPRESSURE_OK);
  sync_streams();  // stream-ordered returns to the host backend run now
  std::size_t reserved = 1;
  usage_live(m.a, &reserved);
  REQUIRE(reserved == 0, "reserved bytes after trim", num(reserved));
  REQUIRE(gcpressure_destroy(m.a) == GCPRESSURE_OK);
  void* p = nullptr;
  REQUIRE(gcpressure_alloc(m.a, 1, nullptr, &p) == GCPRESSURE_ERR_SHUTDOWN, "alloc after destroy");
  g_tombstones->push_back(m.a);
  REQUIRE(g_misuse_reports.load() == 0, "misuse reported from a noexcept path");
}

// The header's policy byte indexes gcpressure_policy_names() (the corpus's
// policy_*.bin files, tests/fuzz/make_corpus.py, follow its order).
std::size_t policy_count() {
  static const std::size_t n = [] {
    std::size_t k = 0;
    while (gcpressure_policy_names()[k]) ++k;
    return k;
  }();
  return n;
}
constexpr std::size_t k_hards[] = {1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 24 * MiB, 32 * MiB, 64 * MiB};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (gcpressure_boehm_init(/*incremental=*/0, /*finalizer_thread=*/0) != GCPRESSURE_OK) std::abort();
  // Roots: only the handle arrays (and the stacks). The executable's data
  // holds libFuzzer's and the sanitizers' tables (megabytes of words that
  // Boehm would scan at every collection, and that may look like pointers);
  // nothing else in this process keeps a GC object alive.
  GC_set_no_dls(1);
  GC_clear_roots();
  GC_add_roots(g_held, g_held + k_held);
  GC_add_roots(g_freed_handles, g_freed_handles + 16);
  g_streams[0] = new gcpressure::host_stream;  // process lifetime: the pool may remember them
  g_streams[1] = new gcpressure::host_stream;
  g_tombstones = new std::vector<gcpressure_allocator*>;
  gcpressure::set_misuse_handler(on_misuse);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader r{data, size};
  model m;
  gcpressure_options o;
  gcpressure_options_init(&o);
  o.backend = GCPRESSURE_BACKEND_HOST;
  o.host_capacity = std::size_t{1} << 30;
  o.collector = GCPRESSURE_COLLECTOR_BOEHM;
  const std::uint8_t h0 = r.u8(), h1 = r.u8();
  m.hard = k_hards[h0 % 8];
  const std::string hard = std::to_string(m.hard);
  o.hard_limit = hard.c_str();
  o.policy = gcpressure_policy_names()[h1 % policy_count()];
  REQUIRE(gcpressure_create(&o, &m.a) == GCPRESSURE_OK, "create");

  int steps = 0;
  while (!r.empty() && steps++ < 512) {
    switch (r.u8() % 14) {
      case 0:
      case 1: op_alloc(m, r); break;
      case 2: op_free(m, r); break;
      case 3: op_misuse(m, r); break;
      case 4:
      case 5: op_boehm_alloc(m, r); break;
      case 6: op_unsafe_free(m, r); break;
      case 7: op_drop(m, r); break;
      case 8: {
        const bool full = r.u8() & 1;
        clear_stack();
        REQUIRE(gcpressure_collect(m.a, full) == GCPRESSURE_OK, "collect");
        exact_check(m);
        break;
      }
      case 9:  // a collection the runtime runs on its own (finalizers run when they run)
        clear_stack();
        GC_gcollect();
        break;
      case 10:
        REQUIRE(gcpressure_drain(m.a) == GCPRESSURE_OK);
        break;
      case 11: {
        reserve_guard g(m);
        REQUIRE(gcpressure_trim(m.a) == GCPRESSURE_OK);
        break;
      }
      case 12: op_limits(m, r); break;
      default:
        switch (r.u8() % 3) {
          case 0: REQUIRE(gcpressure_quiet_moment(m.a) == GCPRESSURE_OK); break;
          case 1: REQUIRE(gcpressure_iteration(m.a) == GCPRESSURE_OK); break;
          default: exact_check(m); break;
        }
    }
    bounds_check(m);
  }
  finish(m);
  return 0;
}
