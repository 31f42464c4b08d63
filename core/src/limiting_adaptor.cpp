// limiting_adaptor: a hard byte limit over any device_resource (the
// allocator's hard_limit). It owns only the reserved count and the sizes of
// its live allocations; the upstream does the allocating.
#include <algorithm>
#include <mutex>
#include <sstream>

#include "gcpressure/error.hpp"
#include "gcpressure/pool_resource.hpp"

namespace gcpressure {

void* limiting_adaptor::do_allocate(std::size_t bytes, stream_ref stream) {
  GCPRESSURE_EXPECTS(bytes > 0, "limiting_adaptor::allocate: zero-byte request");
  const std::size_t n = round_up(bytes, alignment);
  {
    std::lock_guard<std::mutex> lk(mu_);
    const std::size_t lim = limit();
    const std::size_t cur = used();
    if (bytes > max_request_bytes || n > lim || cur > lim - n) {
      std::ostringstream os;
      os << "hard limit: reserving " << bytes << " more bytes would exceed the hard limit of " << lim << " bytes ("
         << cur << " reserved)";
      throw out_of_memory(os.str());
    }
    usage_.add(static_cast<std::int64_t>(n));
  }
  void* p;
  try {
    p = upstream_.allocate(bytes, stream);
  } catch (...) {
    usage_.sub(static_cast<std::int64_t>(n));
    throw;
  }
  try {
    std::lock_guard<std::mutex> lk(mu_);
    live_.emplace(p, n);
  } catch (...) {
    upstream_.deallocate(p, bytes, stream);
    usage_.sub(static_cast<std::int64_t>(n));
    throw out_of_memory("limiting_adaptor: no host memory for bookkeeping");
  }
  return p;
}

std::size_t limiting_adaptor::do_headroom() const noexcept {
  const std::size_t lim = limit();
  const std::size_t cur = used();
  return std::min(lim > cur ? lim - cur : 0, upstream_.headroom());
}

void limiting_adaptor::do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept {
  if (!p) return;
  std::size_t n = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(p);
    if (it != live_.end()) {
      n = it->second;
      live_.erase(it);
    }
  }
  if (n == 0) {
    std::ostringstream os;
    os << "limiting_adaptor::deallocate: " << p << " (" << bytes
       << " bytes) is not a live allocation of this resource (double free or foreign pointer); ignored";
    detail::report_misuse(os.str());
    return;
  }
  upstream_.deallocate(p, bytes, stream);
  usage_.sub(static_cast<std::int64_t>(n));
}

}  // namespace gcpressure
