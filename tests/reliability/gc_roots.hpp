// tests/reliability/gc_roots.hpp — "who still holds this handle?" for the
// Boehm tests (issue 13): when a test's dropped handle survives full
// collections, tell a LOST handle (its finalizer never ran, its block leaked)
// from a conservatively RETAINED one (a stale word in memory the collector
// scans keeps it reachable).
//
// Note [Lost or retained]
// - handle_log records every handle a workload allocated, hidden (~address),
//   in malloc'd memory the collector does not scan, so the log itself holds
//   nothing alive.
// - After the collections, find_survivors() names the recorded handles that
//   are still live (state live, a GC object start, a size): the handles whose
//   blocks are still allocated.
// - For each survivor, Boehm's mark bit says whether the last full collection
//   found it reachable (a finalizable object it found unreachable is marked
//   too, but then its finalizer is queued and the settle loop runs it; a
//   survivor that stays live after the finalizers ran was reachable).
// - find_words() searches every writable mapping (and anonymous read-only
//   one: write-protected heap pages) for the survivor's
//   address and names the mapping of each hit (a thread stack, a library's
//   data segment, the GC heap): the stale word that retains it.
// Not thread-safe; call with the workload's threads joined. Include after
// <gc/gc.h>.
#pragma once

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gcp_rel {

// libgc's own static memory: from its load address to the end of its last
// loaded segment, .data and .bss included (the .bss tail past the file is an
// anonymous mapping, named "anon" in a word_hit). bdwgc scans this as a root
// except GC_arrays and GC_obj_kinds (GC_init excludes those), so a stale
// pointer the collector keeps here (the mmap hint, Note [bdwgc's mmap hint is
// a root] in survivors.hpp) retains an object that no program word names.
// Found through GC_malloc's address; used to label hits.
struct address_range {
  std::uintptr_t lo = 0, hi = 0;
  bool contains(std::uintptr_t a) const { return a >= lo && a < hi; }
};
inline address_range libgc_static_memory() {
  struct arg_t {
    std::uintptr_t probe;
    address_range found;
  } arg{reinterpret_cast<std::uintptr_t>(&GC_malloc), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* p) -> int {
        auto* a = static_cast<arg_t*>(p);
        address_range r{UINTPTR_MAX, 0};
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          r.lo = std::min<std::uintptr_t>(r.lo, info->dlpi_addr + ph.p_vaddr);
          r.hi = std::max<std::uintptr_t>(r.hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        if (!r.contains(a->probe)) return 0;
        a->found = r;
        return 1;
      },
      &arg);
  return arg.found;
}

// Every handle one thread allocated, stored hidden. One per thread.
class handle_log {
 public:
  void reserve(std::size_t n) { hidden_.reserve(n); }
  void add(const void* p) { hidden_.push_back(~reinterpret_cast<std::uintptr_t>(p)); }
  const std::vector<std::uintptr_t>& hidden() const { return hidden_; }

 private:
  std::vector<std::uintptr_t> hidden_;
};

// One place a word pointing into the searched object was found.
struct word_hit {
  std::uintptr_t at = 0;
  std::size_t offset = 0;  // the word points this far into the object (interior pointer)
  std::string where;       // the mapping: "[stack]", a path, or "anon lo-hi (size)"; the symbol if known
  std::size_t mapping_bytes = 0;
  bool in_gc_object = false;
  bool writable = true;  // false: a read-only mapping (never cleared)
  bool after_guard = false;  // its mapping has a guard page below (a thread stack's shape)
};

namespace detail_roots {
struct mapping {
  std::uintptr_t lo = 0, hi = 0;
  std::string name;
  bool writable = true;
  bool after_guard = false;  // an anonymous no-access mapping ends where this one starts
};

// A glibc thread stack is an anonymous mapping with its guard page, an
// anonymous no-access mapping, right below it; malloc arenas have theirs
// above, bdwgc's scratch memory has none.
inline std::vector<mapping> scanned_mappings() {
  std::vector<mapping> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::uintptr_t guard_end = 0;  // the end of the last anonymous ---p mapping
  while (std::getline(maps, line)) {
    std::istringstream ls(line);
    std::string range, perms, off, dev, inode, name;
    ls >> range >> perms >> off >> dev >> inode;
    std::getline(ls >> std::ws, name);
    const std::uintptr_t lo = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const std::uintptr_t hi = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    const bool after_guard = lo == guard_end;
    if (perms.rfind("---", 0) == 0 && name.empty()) guard_end = hi;
    // Read-only anonymous memory too: incremental mode write-protects GC
    // heap pages between collections (mprotect dirty bits), and a word in a
    // GC object there is as much a candidate as one in a writable page.
    if (perms.size() < 2 || perms[0] != 'r' || (perms[1] != 'w' && !name.empty())) continue;
    if (name == "[vvar]" || name == "[vsyscall]" || name == "[vdso]") continue;
    mapping m;
    m.lo = lo;
    m.hi = hi;
    m.after_guard = after_guard;
    // A sanitizer's shadow memory: terabytes of reserved anonymous memory,
    // parts of which fault when read; no program data lives there.
    if (name.empty() && m.hi - m.lo > (std::uintptr_t{1} << 36)) continue;
    m.name = name;
    m.writable = perms[1] == 'w';
    out.push_back(m);
  }
  return out;
}

inline std::string describe(const mapping& m) {
  if (!m.name.empty()) return m.name;
  char buf[96];
  std::snprintf(buf, sizeof buf, "anon %#" PRIxPTR "-%#" PRIxPTR " (%zu KiB)", m.lo, m.hi,
                static_cast<std::size_t>((m.hi - m.lo) / 1024));
  return buf;
}

// Reads raw memory, a sanitizer's shadow included: not instrumented (an
// instrumented read of shadow memory checks the shadow gap and faults).
template <class IsGcObject>
__attribute__((no_sanitize("address", "thread"))) void scan(const mapping& m, std::uintptr_t target_hidden,
                                                            std::size_t size, IsGcObject& is_gc_object,
                                                            std::vector<word_hit>& hits) {
  for (std::uintptr_t a = m.lo; a + sizeof(std::uintptr_t) <= m.hi; a += sizeof(std::uintptr_t)) {
    const std::uintptr_t w = *reinterpret_cast<const volatile std::uintptr_t*>(a);
    if (w - ~target_hidden >= size) continue;
    std::string where = describe(m);
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(a), &info) && info.dli_sname) {
      where += " (";
      where += info.dli_sname;
      where += " + " + std::to_string(a - reinterpret_cast<std::uintptr_t>(info.dli_saddr)) + ")";
    }
    if (!m.writable) where += " (read-only)";
    hits.push_back({a, w - ~target_hidden, where, m.hi - m.lo, is_gc_object(a), m.writable, m.after_guard});
  }
}
}  // namespace detail_roots

// Every aligned word pointing into [target, target + size) (target given
// hidden, ~address; bdwgc recognises interior pointers) in readable, writable
// memory. Runs on a thread of its own and skips that thread's stack (which
// holds the target while searching): the caller's stack, with the
// callee-saved registers its callees pushed, is searched whole.
// `is_gc_object` tells whether an address lies inside a GC-heap object.
template <class IsGcObject>
std::vector<word_hit> find_words(std::uintptr_t target_hidden, std::size_t size, IsGcObject&& is_gc_object) {
  std::vector<word_hit> hits;
  std::thread([&] {
    volatile char here = 0;
    const auto self = reinterpret_cast<std::uintptr_t>(&here);
    for (const auto& m : detail_roots::scanned_mappings())
      if (self < m.lo || self >= m.hi) detail_roots::scan(m, target_hidden, size, is_gc_object, hits);
  }).join();
  return hits;
}

// The distinct recorded handles (hidden) of several logs.
inline std::vector<std::uintptr_t> distinct_handles(const std::vector<const handle_log*>& logs) {
  std::vector<std::uintptr_t> all;
  for (const auto* l : logs) all.insert(all.end(), l->hidden().begin(), l->hidden().end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

}  // namespace gcp_rel
