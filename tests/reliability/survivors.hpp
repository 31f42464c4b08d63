// tests/reliability/survivors.hpp — the survivor report over a Boehm
// device_heap (Note [Lost or retained], gc_roots.hpp): which recorded
// handles are still live after the final collections, whether Boehm found
// each reachable, which words point at it, and whether clearing one of those
// words (or growing bdwgc's heap) lets the next full collection finalize it.
// Used by the soak (test_soak.cpp) and by the Boehm tests whose accounting
// must be exact (test_boehm.cpp). Include after boehm_test_support.hpp.
#pragma once

#include <string>
#include <vector>

#include "boehm_test_support.hpp"
#include "gc_roots.hpp"

// This executable's .bss (GNU ld's symbols; clearable()).
extern "C" char __bss_start[], _end[];

namespace gcp_rel {

using namespace std::chrono_literals;
using gcp_test::clear_stack;
using gcp_test::settle;

[[gnu::noinline]] inline void full_collect(gb::device_heap& h) {
  clear_stack();
  h.collect(gcp::gc_kind::blocking_full);
}

// The same from a new registered thread, whose stack and registers never held
// a handle and whose collection frames lie elsewhere (Note [Lost or
// retained]).
inline void full_collect_on_fresh_thread(gb::device_heap& h) {
  std::thread([&h] {
    gb::thread_scope reg;
    full_collect(h);
  }).join();
}

// Note [Lost or retained] (gc_roots.hpp): the recorded handles still live
// after the final collections, each with its mark bit and the words that
// point at it. Returns their bytes; prints one line per survivor.
inline std::string to_hex(std::uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

struct survivors {
  std::size_t count = 0, bytes = 0, unmarked = 0, released = 0, released_bytes = 0;
  // Of `released`: by clearing a word in a thread's stack (a stale slot, or
  // a live local: the caller knows which stacks hold none), in a data
  // segment (a global: a real root, unless the caller put it there), or by
  // growing bdwgc's heap (bdwgc's own reference).
  std::size_t by_stack_word = 0, by_global_word = 0, by_heap_growth = 0;
  // Marked, and released neither way (Note [A survivor no word explains]).
  std::size_t unexplained = 0, unexplained_bytes = 0;
};

// What Boehm and the handle say about a recorded handle (given hidden, so
// that no frame above this one holds it while the caller collects).
struct handle_facts {
  bool live = false, marked = false;
  std::size_t bytes = 0, size = 0;  // device bytes; the handle's GC object size
  std::string address;              // printed here: no frame that collects computes it
};
[[gnu::noinline]] inline handle_facts inspect_frame(std::uintptr_t hidden) {
  handle_facts f;
  auto* b = reinterpret_cast<gb::buffer*>(~hidden);
  if (GC_base(b) != b || !gb::device_heap::is_live(b) || gb::device_heap::size(b) == 0) return f;
  f.live = true;
  f.bytes = gb::device_heap::size(b);
  f.size = GC_size(b);
  f.address = to_hex(reinterpret_cast<std::uintptr_t>(b));
  struct arg_t {
    void* p;
    int marked;
  } arg{b, 0};
  GC_call_with_alloc_lock(
      [](void* a) -> void* {
        auto* x = static_cast<arg_t*>(a);
        x->marked = GC_is_marked(x->p);
        return nullptr;
      },
      &arg);
  f.marked = arg.marked != 0;
  return f;
}
// The frames that held the handle are scrubbed before returning: a stale copy
// there would retain it through the next collection.
[[gnu::noinline]] inline handle_facts inspect(std::uintptr_t hidden) {
  const handle_facts f = inspect_frame(hidden);
  clear_stack();
  return f;
}

// Words the experiment below may clear: in a thread stack or a data segment
// outside bdwgc. bdwgc's own data and anonymous memory (its block headers,
// mark stack, malloc arenas) hold words that are not roots, and clearing
// those corrupts the collector ("Unexpected mark stack overflow", seen).
// This executable's .bss (GNU ld's symbols): its tail past the last page of
// the file is an anonymous mapping, named "anon" like bdwgc's memory, and
// whether a global such as g_kept lands there depends on the binary's layout
// (__bss_start and _end, declared above). Never a read-only page.
//
// A thread stack: the main thread's "[stack]", or an anonymous mapping of
// 1 MiB or more with a guard page right below it (glibc's thread stacks;
// scanned_mappings(), gc_roots.hpp). Without the guard test a 1.3 MiB
// mapping of bdwgc's block bookkeeping was taken for one and its word
// cleared for a collection (a 2026-12-06 ASan run: restored, no harm seen).
inline bool in_a_thread_stack(const word_hit& w) {
  return w.where.rfind("[stack]", 0) == 0 ||
         (w.where.rfind("anon", 0) == 0 && w.mapping_bytes >= (std::size_t{1} << 20) && w.after_guard);
}
inline bool clearable(const word_hit& w) {
  if (!w.writable || w.in_gc_object || w.where.find("libgc") != std::string::npos) return false;
  if (w.at >= reinterpret_cast<std::uintptr_t>(__bss_start) && w.at < reinterpret_cast<std::uintptr_t>(_end))
    return true;  // this executable's own globals
  if (w.where.rfind("anon", 0) == 0) return in_a_thread_stack(w);
  return w.where.rfind("[stack]", 0) == 0 || w.where.rfind("/", 0) == 0;  // a loaded object's data segment
}

// Note [bdwgc's mmap hint is a root]
// In every failing run seen, the survivor was the first object of a heap
// section, and the one scanned word pointing at it was bdwgc's own: the
// static `last_addr` of GC_unix_mmap_get_mem (os_dep.c), the end of the
// region bdwgc mapped last, kept as the hint for its next mmap. It lives in
// libgc's .bss (Debian's libgc.so.1.5.1: offset 0x5a760, past GC_arrays,
// which bdwgc excludes from its roots; this word it does not exclude), so
// when the kernel places a new mapping (scratch space, a heap section) right
// below an earlier heap section, the hint equals that section's start and
// retains its first object. Measured on Boehm.RegisteredThreads... (issue 25):
// 10 of 1600 runs beside two CPU hogs had such a survivor, and in all 10
// zeroing that word (a temporary clearable() that allowed it) let the next
// full collection finalize it. Growing the heap maps memory, which moves the
// hint: collect fully after that and see whether the survivor is finalized.
[[gnu::noinline]] inline bool released_by_heap_growth(gb::device_heap& h, std::uintptr_t hidden) {
  GC_expand_hp(4u << 20);
  full_collect_on_fresh_thread(h);
  settle(h, [&] { return !inspect(hidden).live; }, 500ms);
  return !inspect(hidden).live;
}

// Note [A survivor no word explains]
// A survivor Boehm marked that neither clearing a word of a stack or a global
// nor growing the heap released is held by state the search cannot name or
// must not clear: a register, a word in bdwgc's own memory (its statics, past
// GC_arrays, which it scans as roots: libgc_static_memory() marks such hits),
// or a word in a GC object. Seen in CI's ASan run of
// Boehm.RegisteredThreads... (2026-12-06, session 15's head; 1 handle of 2400,
// 677121 bytes): two words pointed at it, both in an anonymous mapping just
// below its heap section; words at that place sat beside every survivor of
// issue 25's diagnostic runs, where a thread's stack word was the one that
// retained: bdwgc's block bookkeeping, not the root. Reproduced in that ASan
// build, two loops of the test beside a CPU hog: 3 of 451 runs (the mmap
// hint: 78), the other words then in ASan's malloc heap, which bdwgc does
// not scan (bench/RESULTS.md, 2026-12-06 (session 16)). Callers
// allow one such handle: two, or one beside a stack or global word, or an
// unmarked one, still fails.

// Proves which word retains a survivor: zeroes one candidate word, collects
// fully and runs the finalizers; restores the word if the handle is still
// live. True if this word was what kept it.
[[gnu::noinline]] inline bool released_by_clearing(gb::device_heap& h, std::uintptr_t hidden, std::uintptr_t at) {
  auto* word = reinterpret_cast<volatile std::uintptr_t*>(at);
  const volatile std::uintptr_t saved_hidden = ~*word;  // volatile: no register keeps the plain value
  *word = 0;
  full_collect_on_fresh_thread(h);
  settle(h, [&] { return !inspect(hidden).live; }, 500ms);
  if (!inspect(hidden).live) return true;
  *word = ~saved_hidden;
  return false;
}

// Note [Lost or retained] (gc_roots.hpp): the recorded handles still live
// after the final collections, each with its mark bit and the words that
// point at it; a survivor whose pointing word, once cleared, lets the next
// full collection finalize it was retained (counted in `released`).
[[gnu::noinline]] inline survivors find_survivors(gb::device_heap& h, const std::vector<const handle_log*>& logs,
                                                 const char* tag) {
  survivors out;
  for (const std::uintptr_t hidden : distinct_handles(logs)) {
    const handle_facts f = inspect(hidden);
    if (!f.live) continue;
    ++out.count;
    out.bytes += f.bytes;
    if (!f.marked) ++out.unmarked;
    const auto hits = find_words(hidden, f.size, [](std::uintptr_t a) {
      return GC_base(reinterpret_cast<void*>(a)) != nullptr;
    });
    std::printf("[ %s ] survivor 0x%s: %zu bytes, %s, %zu word(s) point into it\n", tag, f.address.c_str(), f.bytes,
                f.marked ? "marked (reachable)" : "NOT marked", hits.size());
    std::fflush(stdout);
    const address_range libgc = libgc_static_memory();
    bool named_by_libgc = false;
    for (const auto& w : hits) {
      const bool in_libgc = libgc.contains(w.at);
      named_by_libgc = named_by_libgc || in_libgc;
      std::printf("    word at 0x%s (+%zu) in %s%s%s%s\n", to_hex(w.at).c_str(), w.offset, w.where.c_str(),
                  w.in_gc_object ? " (a GC object)" : "", in_libgc ? " (libgc's static memory + 0x" : "",
                  in_libgc ? (to_hex(w.at - libgc.lo) + ")").c_str() : "");
    }
    std::fflush(stdout);
    bool released = false;
    for (const auto& w : hits) {
      if (!clearable(w) || !released_by_clearing(h, hidden, w.at)) continue;
      const bool stack = in_a_thread_stack(w);
      std::printf("    RETAINED by the word at 0x%s (%s): cleared, the next full collection finalized it\n",
                  to_hex(w.at).c_str(), stack ? "a thread's stack" : "a global");
      ++(stack ? out.by_stack_word : out.by_global_word);
      released = true;
      break;
    }
    if (!released && released_by_heap_growth(h, hidden)) {
      std::printf("    RETAINED by bdwgc: once its heap grew (a new mapping, a new mmap hint: Note [bdwgc's mmap "
                  "hint is a root]), the next full collection finalized it\n");
      ++out.by_heap_growth;
      released = true;
    }
    if (released) {
      ++out.released;
      out.released_bytes += f.bytes;
    } else if (f.marked) {
      std::printf("    UNEXPLAINED: marked, released neither by clearing a word of a stack or a global nor by heap "
                  "growth%s (Note [A survivor no word explains])\n",
                  named_by_libgc ? "; a word in libgc's own static memory names it" : "");
      ++out.unexplained;
      out.unexplained_bytes += f.bytes;
    }
    std::fflush(stdout);
  }
  return out;
}

}  // namespace gcp_rel
