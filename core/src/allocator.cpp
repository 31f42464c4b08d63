// device_allocator: the façade a runtime talks to.
//
// The path of a block (docs/DESIGN.md has the picture):
//   allocate → hook.before_allocate (policy may collect) → drain deferred
//   frees → pool (→ limiting adaptor → upstream) → on failure the reclaim
//   ladder, retrying after each step → out_of_memory with the whole story.
//
// Note [Locks and collections]
// No allocator lock is held while the hook runs: a collection runs
// finalizers, finalizers push onto the deferred queue (lock-free), and a
// runtime may free from inside them. The pool lock is taken only inside
// pool_resource calls and never across a hook call.
#include "gcpressure/allocator.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <unordered_map>

#include "gcpressure/collection_scope.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"

namespace gcpressure {

// --- deferred_free_queue (out of line: not a template) -----------------------

deferred_free_queue::~deferred_free_queue() {
  deferred_free* n = head_.exchange(nullptr);
  while (n) {
    deferred_free* next = n->next;
    delete n;
    n = next;
  }
}

bool deferred_free_queue::push(void* ptr, std::size_t bytes, stream_ref stream) noexcept {
  auto* n = new (std::nothrow) deferred_free{ptr, bytes, stream, nullptr};
  if (!n) return false;
  n->next = head_.load(std::memory_order_relaxed);
  while (!head_.compare_exchange_weak(n->next, n, std::memory_order_release, std::memory_order_relaxed)) {
  }
  pending_.fetch_add(1, std::memory_order_relaxed);
  pending_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  pushed_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// --- construction ------------------------------------------------------------

struct nopool_table {
  std::unordered_map<const void*, std::size_t> live;
};

std::unique_ptr<device_resource> make_resource(const allocator_options& o) {
  if (o.backend != backend_kind::host && !cuda_available()) throw logic_error(no_cuda_device_message("backend"));
  switch (o.backend) {
    case backend_kind::host: {
      // One shared simulated device per device number, as each GPU's memory is its own.
      const std::string shared =
          o.host_shared.empty() || o.device == 0 ? o.host_shared : o.host_shared + "." + std::to_string(o.device);
      return std::make_unique<host_resource>(o.host_capacity, shared);
    }
    case backend_kind::cuda: return std::make_unique<cuda_resource>(o.device);
    case backend_kind::cuda_async: return std::make_unique<cuda_async_resource>(o.device, o.async_release_threshold);
  }
  GCPRESSURE_FAIL("make_resource: unknown backend");
}

std::string no_cuda_device_message(std::string_view option) {
  return "gcpressure: no usable CUDA device (" + std::string(cuda_unavailable_reason()) + "); use " +
         std::string(option) + " host or auto";
}

allocator_options allocator_options::from_config(const config& c) {
  allocator_options o{.device = c.device,
                      .host_capacity = c.host_capacity,
                      .host_shared = c.host_shared,
                      .soft_limit = c.soft_limit,
                      .hard_limit = c.hard_limit,
                      .pool = c.pool,
                      .async_release_threshold = c.async_release_threshold};
  switch (c.backend) {
    case backend_choice::automatic: o.backend = cuda_available() ? backend_kind::cuda_async : backend_kind::host; break;
    case backend_choice::host: o.backend = backend_kind::host; break;
    case backend_choice::cuda: o.backend = backend_kind::cuda; break;
    case backend_choice::cuda_async: o.backend = backend_kind::cuda_async; break;
  }
  return o;
}

std::vector<allocator_options> allocator_options::per_device(const config& c) {
  std::vector<allocator_options> out;
  for (int d : c.device_list()) {
    out.push_back(from_config(c));
    out.back().device = d;
  }
  return out;
}

device_allocator::device_allocator(allocator_options opts) : opts_(opts) {
  owned_upstream_ = make_resource(opts_);
  build_stack(*owned_upstream_);
}

device_allocator::device_allocator(device_resource& upstream, allocator_options opts) : opts_(opts) {
  build_stack(upstream);
}

// upstream → limiting adaptor (hard limit, resolved against the device) → pool.
// A "%avail" limit is resolved against the free memory now (nothing is
// reserved yet), and again by every refresh_limits().
void device_allocator::build_stack(device_resource& upstream) {
  upstream_ = &upstream;
  const device_memory_info m = upstream_->memory_info();
  const std::size_t avail = std::min(m.free, m.total);
  const auto resolve = [&](const size_spec& l) { return l.resolve(l.of_available ? avail : m.total); };
  const std::size_t hard = opts_.hard_limit.is_set() ? resolve(opts_.hard_limit) : m.total;
  const std::size_t soft = opts_.soft_limit.is_set() ? resolve(opts_.soft_limit) : hard / 4 * 3;
  GCPRESSURE_EXPECTS(hard > 0, "device_allocator: the hard limit resolves to 0 bytes (hard limit " +
                                   opts_.hard_limit.to_string() + ", device " + format_bytes(m.free) + " free of " +
                                   format_bytes(m.total) + ")");
  // Note [Soft above hard] (config.hpp): a fixed soft limit above the hard
  // one is rejected; one that follows the available memory is kept under the
  // hard limit as the memory moves (resolve_limits).
  if (opts_.soft_limit.is_set() && !opts_.soft_limit.of_available && soft > hard)
    throw logic_error(soft_above_hard_message(soft, hard));
  limiter_ = std::make_unique<limiting_adaptor>(*upstream_, hard);
  soft_limit_.store(std::min(soft, hard));
  hard_follows_ = opts_.hard_limit.is_set() && opts_.hard_limit.of_available;
  soft_follows_ = opts_.soft_limit.is_set() && opts_.soft_limit.of_available;
  soft_from_hard_ = !opts_.soft_limit.is_set();
  soft_base_ = soft;
  follows_.store(hard_follows_ || soft_follows_);
  available_.store(avail);
  available_min_.store(avail);
  seen_available_ = avail;
  seen_hard_ = hard;
  if (opts_.pool) pool_ = std::make_unique<pool_resource>(*limiter_, opts_.pool_opts);
  else nopool_ = std::make_unique<nopool_table>();
}

// --- limits of available memory ----------------------------------------------

void device_allocator::set_soft_limit(std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lk(limits_mu_);
  soft_follows_ = soft_from_hard_ = false;
  soft_base_ = bytes;
  follows_.store(hard_follows_, std::memory_order_relaxed);
  soft_limit_.store(bytes, std::memory_order_relaxed);
}

// Note [A lowered limit is met at once where it can be]: idle cached
// segments go back before this returns (outside every lock, as at a
// refresh), so reserved <= hard holds again unless blocks in use exceed the
// new limit; then no allocation grows reserved, and each free returns what
// has become idle (free()) until reserved is under the limit again.
void device_allocator::set_hard_limit(std::size_t bytes) noexcept {
  {
    std::lock_guard<std::mutex> lk(limits_mu_);
    hard_follows_ = false;
    follows_.store(soft_follows_, std::memory_order_relaxed);
    limiter_->set_limit(bytes);
  }
  if (reserved_bytes() > hard_limit()) release_cached();
}

// Under limits_mu_: the "%avail" limits for `available` bytes. A soft limit
// never exceeds a hard one that follows (as at construction).
void device_allocator::resolve_limits(std::size_t available) {
  std::size_t hard = hard_limit();
  if (hard_follows_) {
    hard = std::max<std::size_t>(opts_.hard_limit.resolve(available), 1);
    limiter_->set_limit(hard);
  }
  if (soft_follows_) soft_limit_.store(std::min(opts_.soft_limit.resolve(available), hard), std::memory_order_relaxed);
  else if (hard_follows_) soft_limit_.store(soft_from_hard_ ? hard / 4 * 3 : std::min(soft_base_, hard), std::memory_order_relaxed);
}

device_memory_info device_allocator::refresh_limits() {
  const device_memory_info m = upstream_->memory_info();
  {
    std::lock_guard<std::mutex> lk(limits_mu_);
    // Our own reserved bytes are available to us (read after the device: an
    // allocation in between makes it a slight overestimate).
    const std::size_t avail = std::min(m.total, m.free + reserved_bytes());
    resolve_limits(avail);
    available_.store(avail, std::memory_order_relaxed);
    if (avail < available_min_.load(std::memory_order_relaxed)) available_min_.store(avail, std::memory_order_relaxed);
    // A headroom change: 10% of movement since the last one, so a slow drift
    // counts once it adds up and jitter never does.
    const auto moved = [](std::size_t was, std::size_t now) {
      const std::size_t d = was > now ? was - now : now - was;
      return d > 0 && d >= was / 10;
    };
    if (moved(seen_available_, avail) || moved(seen_hard_, hard_limit())) {
      headroom_changes_.fetch_add(1, std::memory_order_relaxed);
      seen_available_ = avail;
      seen_hard_ = hard_limit();
    }
  }
  // Over a limit that shrank: the pool's idle segments go back at once, so
  // that a tenant waiting for memory gets it (outside every lock).
  if (reserved_bytes() > hard_limit()) release_cached();
  return m;
}

bool device_allocator::limit_grew_on_refresh() noexcept {
  try {
    const std::size_t before = hard_limit();
    refresh_limits();
    return hard_limit() > before;
  } catch (...) {
    return false;  // no device information (a driver error): the ladder runs as before
  }
}

// At most one refresh per k_refresh_ns among all threads.
bool device_allocator::refresh_due() noexcept {
  constexpr std::int64_t k_refresh_ns = 100'000'000;  // 0.1 s, the policy's device refresh rate
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t next = next_refresh_ns_.load(std::memory_order_relaxed);
  return now >= next && next_refresh_ns_.compare_exchange_strong(next, now + k_refresh_ns, std::memory_order_relaxed);
}

device_allocator::~device_allocator() {
  drain();
  if (nopool_ && !nopool_->live.empty()) {
    std::ostringstream os;
    os << "device_allocator destroyed with " << nopool_->live.size() << " live block(s); they are leaked";
    detail::report_misuse(os.str());
    for (const auto& [p, bytes] : nopool_->live) detail::leaked_on_purpose(p);  // Note [Leaks on purpose]
  }
  pool_.reset();
}

device_resource& device_allocator::top() noexcept {
  return pool_ ? static_cast<device_resource&>(*pool_) : static_cast<device_resource&>(*limiter_);
}

// --- allocation --------------------------------------------------------------

void* device_allocator::try_allocate(std::size_t bytes, stream_ref stream) {
  void* p = top().allocate(bytes, stream);
  if (pool_) return p;  // the pool accounts under its own lock (Note [Accounting])
  const std::size_t rounded = round_up(bytes, alignment);
  {
    try {
      std::lock_guard<std::mutex> lk(nopool_mu_);
      nopool_->live.emplace(p, bytes);
    } catch (...) {
      limiter_->deallocate(p, bytes, stream);
      throw out_of_memory("device_allocator: no host memory for bookkeeping");
    }
  }
  requested_.add(static_cast<std::int64_t>(bytes));
  allocated_.add(static_cast<std::int64_t>(rounded));
  active_.add(1);
  total_requested_.fetch_add(bytes, std::memory_order_relaxed);
  allocs_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void* device_allocator::allocate(std::size_t bytes, stream_ref stream) {
  if (bytes == 0) GCPRESSURE_FAIL("allocate: zero-byte request (allocate at least 1 byte, or skip the call)");
  if (bytes > max_request_bytes) {
    ooms_.fetch_add(1, std::memory_order_relaxed);
    throw_oom(bytes, "nothing (the request is larger than any device)", "absurd size");
  }
  // Note [Limits of available memory]: before the hook, so the policy sees them.
  if (limits_follow_available() && refresh_due()) refresh_limits();
  // Note [Inside a collection]: no hook, so no nested collection and no
  // wait for the collection this thread is part of.
  allocation_hook* h = in_collection() ? nullptr : hook();
  if (h) h->before_allocate(*this, bytes, stream);
  drain();
  std::string cause;
  try {
    return try_allocate(bytes, stream);
  } catch (const out_of_memory& e) {
    cause = e.what();
  }
  // Another tenant may have left (or taken) memory since the last refresh: a
  // limit that grew is worth one more try before any reclaim step.
  if (limit_grew_on_refresh()) {
    try {
      return try_allocate(bytes, stream);
    } catch (const out_of_memory& e) {
      cause = e.what();
    }
  }
  // Note [Reclaim ladder]: cheapest first; retry after every step that did
  // something. Collector steps belong to the hook; without one they are no-ops.
  std::ostringstream tried;
  for (int i = 0; i < ladder_step_count; ++i) {
    const auto step = static_cast<ladder_step>(i);
    const bool collector_step = step == ladder_step::finish_and_drain || step == ladder_step::full_collection ||
                                step == ladder_step::full_collection_2;
    if (h || !collector_step) ladder_[i].fetch_add(1, std::memory_order_relaxed);  // steps that ran
    std::size_t freed = 0;
    bool did = false;
    switch (step) {
      case ladder_step::release_cache: freed = release_cached(); did = freed > 0; break;
      case ladder_step::wait_streams: did = wait_pending() > 0; break;
      case ladder_step::drain: freed = drain(); did = freed > 0; break;
      case ladder_step::trim: freed = trim(); did = true; break;
      case ladder_step::finish_and_drain:
      case ladder_step::full_collection:
      case ladder_step::full_collection_2:
        if (h) did = h->reclaim(*this, step);
        freed = drain();
        did = did || freed > 0;
        break;
    }
    tried << (i ? ", " : "") << to_string(step);
    if (!h && (step == ladder_step::finish_and_drain || step == ladder_step::full_collection ||
               step == ladder_step::full_collection_2))
      tried << " (no collector)";
    else if (freed) tried << " (freed " << format_bytes(freed) << ")";
    else if (!did) tried << " (nothing to do)";
    if (!did) continue;
    try {
      return try_allocate(bytes, stream);
    } catch (const out_of_memory& e) {
      cause = e.what();
    }
  }
  ooms_.fetch_add(1, std::memory_order_relaxed);
  throw_oom(bytes, tried.str(), cause.c_str());
}

// What of the cached bytes the ladder could return: after release_cache ran,
// the rest are free parts of segments that also hold live blocks.
std::string device_allocator::cached_detail(std::size_t cached) const {
  if (!pool_ || cached == 0) return "";
  const pool_counters c = pool_->counters();
  std::ostringstream os;
  os << " (" << format_bytes(c.releasable) << " releasable; the rest are free parts of segments with live blocks,"
     << " usable only by requests of at most " << format_bytes(c.largest_free) << ")";
  return os.str();
}

void device_allocator::throw_oom(std::size_t bytes, const std::string& tried, const char* cause) {
  const auto s = stats();
  std::ostringstream os;
  os << "gcpressure: out of memory on device " << s.device << " (" << to_string(s.backend) << "): tried to allocate "
     << format_bytes(bytes) << " (" << bytes << " bytes). Live (requested) " << format_bytes(s.requested.current)
     << ", allocated " << format_bytes(s.allocated.current) << ", reserved " << format_bytes(s.reserved.current)
     << ", cached " << format_bytes(s.cached) << cached_detail(s.cached) << ", deferred frees pending "
     << s.deferred_pending << ". Limits: soft limit " << format_bytes(s.soft_limit) << ", hard limit " << format_bytes(s.hard_limit)
     << ". Device: " << format_bytes(s.device_memory.free) << " free of " << format_bytes(s.device_memory.total)
     << ". Reclaim ladder tried: " << tried << ". Last failure: " << cause << ".";
  throw out_of_memory(os.str());
}

// --- frees ------------------------------------------------------------------

void device_allocator::account_free(std::size_t requested, std::size_t rounded) noexcept {
  requested_.sub(static_cast<std::int64_t>(requested));
  allocated_.sub(static_cast<std::int64_t>(rounded));
  active_.sub(1);
  frees_.fetch_add(1, std::memory_order_relaxed);
}

void device_allocator::free(void* p, std::size_t bytes, stream_ref stream) {
  if (!p) GCPRESSURE_FAIL("free: null pointer");
  std::size_t live;
  if (pool_) {
    live = pool_->free_if_live(p, bytes, stream);  // one lookup; frees only a match
  } else {
    std::lock_guard<std::mutex> lk(nopool_mu_);
    auto it = nopool_->live.find(p);
    live = it == nopool_->live.end() ? 0 : it->second;
  }
  if (live == 0) {
    misuse_.fetch_add(1, std::memory_order_relaxed);
    std::ostringstream os;
    os << "free: " << p << " is not a live allocation of this allocator (double free or foreign pointer)";
    GCPRESSURE_FAIL(os.str());
  }
  if (live != bytes) {
    misuse_.fetch_add(1, std::memory_order_relaxed);
    std::ostringstream os;
    os << "free: " << p << " was allocated with " << live << " bytes but freed with " << bytes;
    GCPRESSURE_FAIL(os.str());
  }
  if (!pool_) deallocate(p, bytes, stream);
  // Note [A lowered limit is met at once where it can be]
  if (pool_ && reserved_bytes() > hard_limit()) release_cached();
}

void device_allocator::deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return;
  if (pool_) {
    pool_->deallocate_sized(p, bytes, stream);  // misuse reported and counted by the pool
    return;
  }
  std::size_t had = 0;
  {
    std::lock_guard<std::mutex> lk(nopool_mu_);
    auto it = nopool_->live.find(p);
    if (it != nopool_->live.end()) {
      had = it->second;
      nopool_->live.erase(it);
    }
  }
  if (had == 0) {
    misuse_.fetch_add(1, std::memory_order_relaxed);
    std::ostringstream os;
    os << "device_allocator::deallocate: " << p << " is not a live allocation (double free or foreign pointer); ignored";
    detail::report_misuse(os.str());
    return;
  }
  limiter_->deallocate(p, had, stream);
  account_free(had, round_up(had, alignment));
}

std::size_t device_allocator::drain() noexcept {
  if (deferred_.empty()) return 0;
  std::size_t bytes = 0;
  deferred_.drain([&](void* p, std::size_t n, stream_ref s) {
    deallocate(p, n, s);
    bytes += n;
  });
  return bytes;
}

// --- maintenance and stats ---------------------------------------------------

std::size_t device_allocator::release_cached() noexcept { return pool_ ? pool_->release_cached() : 0; }
std::size_t device_allocator::wait_pending() { return pool_ ? pool_->wait_pending() : 0; }
std::size_t device_allocator::trim() { return pool_ ? pool_->trim() : 0; }
void device_allocator::forget_stream(stream_ref s) {
  drain();  // queued frees may name the stream
  if (pool_) pool_->forget_stream(s);
}

bool device_allocator::owns(const void* p) const noexcept {
  if (pool_) return pool_->owns_live(p);
  std::lock_guard<std::mutex> lk(nopool_mu_);
  return nopool_->live.count(p) != 0;
}

// Note [Accounting]
// With a pool, live/allocated/block counts are kept by the pool under the
// lock it takes anyway, with lock-free mirrors for the finalizer-safe
// getters: a pool hit then costs no extra atomic read-modify-writes. Without
// a pool the allocator keeps them with atomics.
std::size_t device_allocator::live_bytes() const noexcept {
  return pool_ ? pool_->live_bytes() : static_cast<std::size_t>(requested_.current());
}

std::size_t device_allocator::since_mark() const noexcept {
  const std::uint64_t total = pool_ ? pool_->total_requested() : total_requested_.load(std::memory_order_relaxed);
  const std::uint64_t base = mark_base_.load(std::memory_order_relaxed);
  return total > base ? static_cast<std::size_t>(total - base) : 0;
}

void device_allocator::mark() noexcept {
  mark_base_.store(pool_ ? pool_->total_requested() : total_requested_.load(std::memory_order_relaxed),
                   std::memory_order_relaxed);
}

std::uint64_t device_allocator::allocation_count() const noexcept {
  return pool_ ? pool_->allocations() : allocs_.load(std::memory_order_relaxed);
}

void device_allocator::reset_peaks() noexcept {
  if (pool_) pool_->reset_peaks();
  limiter_->reset_peak();
  requested_.reset_peak();
  allocated_.reset_peak();
  active_.reset_peak();
}

device_memory_info device_allocator::device_memory() const { return upstream_->memory_info(); }

allocator_stats device_allocator::stats() const {
  allocator_stats s;
  s.backend = opts_.backend;
  s.device = opts_.device;
  s.requested = requested_.get();
  s.allocated = allocated_.get();
  s.reserved = limiter_->usage();
  s.active_blocks = active_.get();
  s.allocations = allocs_.load(std::memory_order_relaxed);
  s.frees = frees_.load(std::memory_order_relaxed);
  s.misuse_errors = misuse_.load(std::memory_order_relaxed);
  s.ooms = ooms_.load(std::memory_order_relaxed);
  if (pool_) {
    const auto c = pool_->counters();
    s.requested = c.requested_stat;
    s.allocated = c.allocated_stat;
    s.active_blocks = c.blocks_stat;
    s.allocations = c.allocations;
    s.frees = c.frees;
    s.pool_hits = c.hits;
    s.upstream_allocations = c.upstream_allocations;
    s.upstream_frees = c.upstream_frees;
    s.upstream_failures = c.upstream_failures;
    s.cross_stream_waits = c.events_waited;
    s.misuse_errors += c.misuse_errors;
  } else {
    s.upstream_allocations = s.allocations;
    s.upstream_frees = s.frees;
  }
  s.cached = s.reserved.current > s.allocated.current
                 ? static_cast<std::size_t>(s.reserved.current - s.allocated.current)
                 : 0;
  s.since_mark = since_mark();
  s.deferred_pending = deferred_.pending();
  s.soft_limit = soft_limit();
  s.hard_limit = hard_limit();
  s.available_bytes = available_bytes();
  s.available_bytes_min = available_min_.load(std::memory_order_relaxed);
  s.headroom_changes = headroom_changes_.load(std::memory_order_relaxed);
  try {
    s.device_memory = upstream_->memory_info();
  } catch (...) {
    // CUDA may be unloading; leave zeros.
  }
  for (int i = 0; i < ladder_step_count; ++i) s.ladder[i] = ladder_[i].load(std::memory_order_relaxed);
  if (auto* h = hook()) h->fill_stats_for(*this, s.gc);
  return s;
}

}  // namespace gcpressure
