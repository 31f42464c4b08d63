// The simulated device: host memory with a capacity, and host streams whose
// worker threads play the part of kernels still running when buffers drop.
#include "gcpressure/host_resource.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <sstream>
#include <thread>

#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "shared_capacity.hpp"

namespace gcpressure {

namespace detail {
// The steady clock in seconds: the policy's default clock (policy.cpp).
inline double steady_seconds() noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct host_stream_state {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  // When the last task finished (steady clock seconds): the stream has been
  // idle since then if completed == submitted (host_stream_ops::idle_seconds).
  double completed_at = 0;
  bool stop = false;
  std::thread worker;

  void run() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stop requested and nothing left
      auto fn = std::move(queue.front());
      queue.pop_front();
      lk.unlock();
      fn();
      lk.lock();
      ++completed;
      completed_at = steady_seconds();
      cv.notify_all();
    }
  }
  void wait_for(std::uint64_t ticket) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return completed >= ticket; });
  }
};
}  // namespace detail

host_stream::host_stream() : state_(std::make_shared<detail::host_stream_state>()) {
  auto* s = state_.get();
  s->worker = std::thread([s] { s->run(); });
}

host_stream::~host_stream() {
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->worker.joinable()) state_->worker.join();
}

void host_stream::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->queue.push_back(std::move(fn));
    ++state_->submitted;
  }
  state_->cv.notify_all();
}

void host_stream::synchronize() {
  std::uint64_t t;
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    t = state_->submitted;
  }
  state_->wait_for(t);
}

namespace {

struct host_event {
  std::shared_ptr<detail::host_stream_state> stream;
  std::uint64_t ticket;
};

class host_stream_ops_impl final : public stream_ops {
 public:
  event_ref record(stream_ref s) override {
    if (!s) return nullptr;  // the default host stream is synchronous
    auto st = static_cast<host_stream*>(s)->state();
    std::uint64_t t;
    {
      std::lock_guard<std::mutex> lk(st->mu);
      t = st->submitted;
    }
    return new host_event{std::move(st), t};
  }
  bool query(event_ref e) override {
    if (!e) return true;
    auto* ev = static_cast<host_event*>(e);
    std::lock_guard<std::mutex> lk(ev->stream->mu);
    return ev->stream->completed >= ev->ticket;
  }
  void synchronize(event_ref e) override {
    if (!e) return;
    auto* ev = static_cast<host_event*>(e);
    ev->stream->wait_for(ev->ticket);
  }
  void release(event_ref e) noexcept override { delete static_cast<host_event*>(e); }
  // The worker stamps each task's end; events are tickets, so the stream's
  // idle time is since its last task ended, if nothing is queued after it.
  double idle_seconds(event_ref e) override {
    if (!e) return -1;  // the synchronous default stream: no work to time
    auto* ev = static_cast<host_event*>(e);
    std::lock_guard<std::mutex> lk(ev->stream->mu);
    if (ev->stream->completed < ev->stream->submitted) return 0;
    return std::max(0.0, detail::steady_seconds() - ev->stream->completed_at);
  }
};

class sync_stream_ops final : public stream_ops {
 public:
  event_ref record(stream_ref) override { return nullptr; }
  bool query(event_ref) override { return true; }
  void synchronize(event_ref) override {}
  void release(event_ref) noexcept override {}
};

}  // namespace

// Both leaked on purpose, as cuda_stream_ops(): a heap that outlives main
// (a leaked or static one) records and releases events through them from
// static destructors or atexit handlers, after a function-local static would
// have died (seen under UBSan: trim after main called a destroyed object).
stream_ops& host_stream_ops() noexcept {
  static auto* ops = new host_stream_ops_impl;
  return *ops;
}

stream_ops& synchronous_stream_ops() noexcept {
  static auto* ops = new sync_stream_ops;
  return *ops;
}

// Note [Stream-ordered host frees]
// A free on a host_stream is queued behind the stream's work, as cudaFreeAsync
// is, so a simulated kernel never writes into memory that was given back. The
// task may outlive the resource; it reaches it through this lifetime block.
struct host_resource_lifetime {
  std::mutex mu;
  host_resource* self = nullptr;
};

host_resource::host_resource(std::size_t capacity, const std::string& shared_path)
    : capacity_(capacity), lifetime_(std::make_shared<host_resource_lifetime>()) {
  GCPRESSURE_EXPECTS(capacity > 0, "host_resource: capacity must be > 0");
  if (!shared_path.empty()) shared_ = std::make_unique<detail::shared_capacity>(shared_path, capacity);
  lifetime_->self = this;
}

host_resource::~host_resource() {
  {
    std::lock_guard<std::mutex> lk(lifetime_->mu);
    lifetime_->self = nullptr;
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (!live_.empty()) {
    std::ostringstream os;
    // A documented leak, never a use-after-free: a runtime may still hold
    // arrays pointing here (like device memory of a context never torn down).
    os << "host_resource destroyed with " << live_.size() << " live allocation(s) (" << format_bytes(used_)
       << "); leaking them so that late users do not touch freed memory";
    detail::report_misuse(os.str());
  }
}

std::size_t host_resource::used() const noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  return used_;
}

std::size_t host_resource::outstanding() const noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  return live_.size();
}

void* host_resource::do_allocate(std::size_t bytes, stream_ref) {
  GCPRESSURE_EXPECTS(bytes > 0, "host_resource::allocate: zero-byte request");
  const std::size_t n = round_up(bytes, alignment);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (bytes > max_request_bytes || n > capacity_ - used_) {
      std::ostringstream os;
      os << "host_resource: cannot allocate " << bytes << " bytes: " << used_ << " of " << capacity_
         << " bytes in use";
      throw out_of_memory(os.str());
    }
    if (shared_ && !shared_->reserve(n)) {
      std::ostringstream os;
      os << "host_resource: cannot allocate " << bytes << " bytes: the shared device (GCPRESSURE_HOST_SHARED) has "
         << shared_->used() << " of " << capacity_ << " bytes in use by all tenants, " << used_ << " by this one";
      throw out_of_memory(os.str());
    }
    used_ += n;
  }
  void* p = std::aligned_alloc(alignment, n);
  std::lock_guard<std::mutex> lk(mu_);
  if (!p) {
    used_ -= n;
    if (shared_) shared_->release(n);
    throw out_of_memory("host_resource: the host has no memory for " + std::to_string(bytes) + " bytes");
  }
  live_.emplace(p, n);
  return p;
}

void host_resource::release_now(void* p, std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    std::ostringstream os;
    os << "host_resource::deallocate: " << p << " (" << bytes
       << " bytes) is not a live allocation of this resource (double free or foreign pointer); ignored";
    detail::report_misuse(os.str());
    return;
  }
  used_ -= it->second;
  if (shared_) shared_->release(it->second);
  std::free(p);
  live_.erase(it);
}

void host_resource::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return;
  if (!stream) return release_now(p, bytes);
  {
    // Validate now, so misuse is reported on the caller's thread.
    std::lock_guard<std::mutex> lk(mu_);
    if (!live_.count(p)) {
      std::ostringstream os;
      os << "host_resource::deallocate: " << p << " is not a live allocation of this resource; ignored";
      detail::report_misuse(os.str());
      return;
    }
  }
  try {
    auto life = lifetime_;
    static_cast<host_stream*>(stream)->enqueue([life, p, bytes] {
      std::lock_guard<std::mutex> lk(life->mu);
      if (life->self) life->self->release_now(p, bytes);
      // The resource is gone and left p to this free (its destructor frees
      // nothing): the stream's work on p is done, so nothing can touch it.
      else std::free(p);
    });
  } catch (...) {
    // Could not queue (no memory): wait for the stream instead of freeing early.
    static_cast<host_stream*>(stream)->synchronize();
    release_now(p, bytes);
  }
}

device_memory_info host_resource::do_memory_info() const {
  if (shared_) {
    const std::size_t all = shared_->used();
    return {all < capacity_ ? capacity_ - all : 0, capacity_};
  }
  std::lock_guard<std::mutex> lk(mu_);
  return {capacity_ - used_, capacity_};
}

stream_ops& host_resource::do_streams() noexcept { return host_stream_ops(); }

}  // namespace gcpressure
