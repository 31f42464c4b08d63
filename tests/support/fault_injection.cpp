// fault_injecting_adaptor: Note [Fault injection] in fault_injection.hpp.
#include "fault_injection.hpp"

#include <string>

#include "gcpressure/error.hpp"

namespace gcpressure {

namespace {

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from a hash.
double unit(std::uint64_t h) noexcept { return static_cast<double>(h >> 11) * 0x1.0p-53; }

// Stream names for the two kinds of decision, so they are independent.
constexpr std::uint64_t k_alloc_stream = 0xA11C0CA7E0000000ULL;
constexpr std::uint64_t k_stream_op_stream = 0x57BEA0000000000ULL;

bool in_unit_interval(double v) noexcept { return v >= 0 && v <= 1; }

}  // namespace

// The adaptor's stream ops: the upstream's, with failures injected in front.
class fault_injecting_adaptor::faulty_streams final : public stream_ops {
 public:
  explicit faulty_streams(fault_injecting_adaptor& owner) : owner_(owner) {}
  event_ref record(stream_ref s) override {
    owner_.maybe_fail_stream_op("record");
    return owner_.upstream_.streams().record(s);
  }
  bool query(event_ref e) override {
    owner_.maybe_fail_stream_op("query");
    return owner_.upstream_.streams().query(e);
  }
  void synchronize(event_ref e) override {
    owner_.maybe_fail_stream_op("synchronize");
    owner_.upstream_.streams().synchronize(e);
  }
  void release(event_ref e) noexcept override { owner_.upstream_.streams().release(e); }

 private:
  fault_injecting_adaptor& owner_;
};

fault_injecting_adaptor::fault_injecting_adaptor(device_resource& upstream, fault_schedule s)
    : upstream_(upstream) {
  set_schedule(s);
  streams_ = new faulty_streams(*this);
}

fault_injecting_adaptor::~fault_injecting_adaptor() { delete streams_; }

void fault_injecting_adaptor::set_schedule(const fault_schedule& s) {
  GCPRESSURE_EXPECTS(in_unit_interval(s.probability), "fault_schedule.probability must be in [0, 1]");
  GCPRESSURE_EXPECTS(in_unit_interval(s.cuda_error_fraction), "fault_schedule.cuda_error_fraction must be in [0, 1]");
  GCPRESSURE_EXPECTS(in_unit_interval(s.stream_op_probability),
                     "fault_schedule.stream_op_probability must be in [0, 1]");
  std::lock_guard<std::mutex> lk(mu_);
  schedule_ = s;
}

fault_schedule fault_injecting_adaptor::schedule() const {
  std::lock_guard<std::mutex> lk(mu_);
  return schedule_;
}

stream_ops& fault_injecting_adaptor::do_streams() noexcept { return *streams_; }

void fault_injecting_adaptor::maybe_fail_stream_op(const char* op) {
  const std::uint64_t n = stream_calls_.fetch_add(1, std::memory_order_relaxed) + 1;
  double p;
  std::uint64_t seed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    p = schedule_.stream_op_probability;
    seed = schedule_.seed;
  }
  if (p <= 0 || unit(splitmix64(seed ^ k_stream_op_stream ^ splitmix64(n))) >= p) return;
  injected_stream_.fetch_add(1, std::memory_order_relaxed);
  const std::string call = std::string("injected fault: stream op ") + op + " #" + std::to_string(n);
  // cudaErrorLaunchFailure (719): what a failed kernel makes every later call on the context return.
  detail::throw_cuda_error(__FILE__, __LINE__, call.c_str(), 719, "cudaErrorLaunchFailure",
                           "unspecified launch failure (injected by fault_injecting_adaptor)");
}

void* fault_injecting_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  const std::uint64_t n = attempts_.fetch_add(1, std::memory_order_relaxed) + 1;
  const fault_schedule s = schedule();
  const std::uint64_t h = splitmix64(s.seed ^ k_alloc_stream ^ splitmix64(n));
  const char* rule = nullptr;
  if (s.every_nth && n % s.every_nth == 0) rule = "every_nth";
  else if (s.probability > 0 && unit(h) < s.probability) rule = "probability";

  // The byte budget: reserve the bytes before the upstream is asked, so that
  // concurrent attempts cannot overshoot it together.
  bool reserved = false;
  if (!rule && bytes > 0) {
    std::size_t cur = handed_out_.load(std::memory_order_relaxed);
    for (;;) {
      if (s.byte_budget && (bytes > s.byte_budget || cur > s.byte_budget - bytes)) {
        rule = "byte_budget";
        break;
      }
      if (handed_out_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) {
        reserved = true;
        break;
      }
    }
  }
  if (rule) {
    const bool as_cuda = s.cuda_error_fraction > 0 && unit(splitmix64(h)) < s.cuda_error_fraction;
    const std::string what = std::string("injected fault (") + rule + ") on upstream allocation #" +
                             std::to_string(n) + " of " + std::to_string(bytes) + " bytes";
    if (as_cuda) {
      injected_cuda_.fetch_add(1, std::memory_order_relaxed);
      // cudaErrorLaunchFailure: a sticky error from an earlier kernel surfacing at an allocation.
      detail::throw_cuda_error(__FILE__, __LINE__, what.c_str(), 719, "cudaErrorLaunchFailure",
                               "unspecified launch failure (injected by fault_injecting_adaptor)");
    }
    injected_oom_.fetch_add(1, std::memory_order_relaxed);
    throw out_of_memory("fault_injecting_adaptor: " + what);
  }
  void* p;
  try {
    p = upstream_.allocate(bytes, stream);
  } catch (...) {
    if (reserved) handed_out_.fetch_sub(bytes, std::memory_order_relaxed);
    upstream_failures_.fetch_add(1, std::memory_order_relaxed);
    throw;
  }
  passed_.fetch_add(1, std::memory_order_relaxed);
  live_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  live_allocations_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void fault_injecting_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return;
  deallocations_.fetch_add(1, std::memory_order_relaxed);
  live_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  live_allocations_.fetch_sub(1, std::memory_order_relaxed);
  upstream_.deallocate(p, bytes, stream);
}

fault_counters fault_injecting_adaptor::counters() const noexcept {
  fault_counters c;
  c.attempts = attempts_.load(std::memory_order_relaxed);
  c.passed = passed_.load(std::memory_order_relaxed);
  c.upstream_failures = upstream_failures_.load(std::memory_order_relaxed);
  c.injected_oom = injected_oom_.load(std::memory_order_relaxed);
  c.injected_cuda = injected_cuda_.load(std::memory_order_relaxed);
  c.stream_op_calls = stream_calls_.load(std::memory_order_relaxed);
  c.injected_stream_ops = injected_stream_.load(std::memory_order_relaxed);
  c.deallocations = deallocations_.load(std::memory_order_relaxed);
  c.bytes_handed_out = handed_out_.load(std::memory_order_relaxed);
  c.live_bytes = live_bytes_.load(std::memory_order_relaxed);
  c.live_allocations = live_allocations_.load(std::memory_order_relaxed);
  return c;
}

std::uint64_t fault_injecting_adaptor::injected() const noexcept {
  return injected_oom_.load(std::memory_order_relaxed) + injected_cuda_.load(std::memory_order_relaxed) +
         injected_stream_.load(std::memory_order_relaxed);
}

}  // namespace gcpressure
