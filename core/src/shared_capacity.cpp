// A simulated device capacity shared by processes: Note [Shared simulated
// capacity] (shared_capacity.hpp).
#include "shared_capacity.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"

namespace gcpressure::detail {

namespace {
constexpr std::uint64_t k_magic = 0x6763707368617265ull;  // "gcpshare"
constexpr std::uint32_t k_version = 1;
constexpr int k_slots = 64;
}  // namespace

// Everything past the header is guarded by `mu`. Slots change owner (pid)
// only under the file lock (flock) as well, so that an open that finds no
// live slot may reset the file: Note [Shared simulated capacity].
struct shared_layout {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t slots;
  std::uint64_t capacity;
  pthread_mutex_t mu;
  std::uint64_t used;
  struct slot {
    std::int64_t pid;  // 0: free
    std::uint64_t bytes;
  } slot[k_slots];
};

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw logic_error("gcpressure: GCPRESSURE_HOST_SHARED='" + path + "': " + why);
}

bool alive(std::int64_t pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// Under `mu`: frees the slots of processes that are gone.
std::uint64_t reclaim_dead(shared_layout& m) {
  std::uint64_t freed = 0;
  for (auto& s : m.slot) {
    if (s.pid == 0 || alive(s.pid)) continue;
    freed += s.bytes;
    m.used -= std::min<std::uint64_t>(m.used, s.bytes);
    s = {0, 0};
  }
  return freed;
}

// Under `mu` after its owner died inside it: `used` may miss one update.
void recount(shared_layout& m) {
  std::uint64_t used = 0;
  for (const auto& s : m.slot)
    if (s.pid != 0) used += s.bytes;
  m.used = used;
}

void init_layout(shared_layout& m, std::size_t capacity, const std::string& path) {
  std::memset(&m, 0, sizeof m);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  const int rc = pthread_mutex_init(&m.mu, &a);
  pthread_mutexattr_destroy(&a);
  if (rc != 0) fail(path, std::string("cannot create its lock: ") + std::strerror(rc));
  m.capacity = capacity;
  m.slots = k_slots;
  m.version = k_version;
  __atomic_store_n(&m.magic, k_magic, __ATOMIC_RELEASE);
}

// The file lock for the scope: slot owners change only under it.
struct file_lock {
  int fd;
  explicit file_lock(int f) : fd(f) {
    while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~file_lock() { ::flock(fd, LOCK_UN); }
};

// Maps the file under the file lock, creating or resetting it where that is
// safe; fails without touching a file that is not ours.
shared_layout* map_file(const std::string& path, int fd, std::size_t capacity) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  const bool fresh = st.st_size == 0;
  if (!fresh && static_cast<std::size_t>(st.st_size) != sizeof(shared_layout))
    fail(path, "exists and is not a gcpressure shared-capacity file (wrong size); not modified");
  if (fresh && ::ftruncate(fd, sizeof(shared_layout)) != 0)
    fail(path, std::string("cannot size the file: ") + std::strerror(errno));
  void* p = ::mmap(nullptr, sizeof(shared_layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
  auto* m = static_cast<shared_layout*>(p);
  bool reset = fresh;
  if (!fresh) {
    if (m->magic != k_magic || m->version != k_version || m->slots != k_slots) {
      ::munmap(p, sizeof(shared_layout));
      fail(path, "exists and is not a gcpressure shared-capacity file (of this version); not modified");
    }
    // No live user: left over from processes that are gone (or a reboot);
    // its lock may even be held by a dead owner the kernel never saw die.
    reset = true;
    for (const auto& s : m->slot)
      if (s.pid != 0 && alive(s.pid)) reset = false;
  }
  if (reset) init_layout(*m, capacity, path);
  return m;
}

}  // namespace

shared_capacity::shared_capacity(const std::string& path, std::size_t capacity) : path_(path) {
  if (path.empty()) fail(path, "empty path");
  GCPRESSURE_EXPECTS(capacity > 0, "shared_capacity: capacity must be > 0");
  // Kept open for the resource's life: the destructor frees the slot under
  // the file lock even if the file was renamed or removed meanwhile.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  try {
    file_lock fl(fd_);
    map_ = map_file(path, fd_, capacity);
    capacity_ = static_cast<std::size_t>(map_->capacity);
    if (capacity_ != capacity) {
      std::ostringstream os;
      os << "the file's capacity is " << format_bytes(capacity_) << " (" << capacity_
         << " bytes) but this process asked for " << format_bytes(capacity) << " (" << capacity
         << " bytes); give every tenant the same GCPRESSURE_HOST_CAPACITY, or remove the file";
      fail(path, os.str());
    }
    if (!lock()) fail(path, "cannot take its lock");
    reclaim_dead(*map_);
    for (int i = 0; i < k_slots && slot_ < 0; ++i)
      if (map_->slot[i].pid == 0) slot_ = i;
    if (slot_ >= 0) map_->slot[slot_] = {static_cast<std::int64_t>(::getpid()), 0};
    unlock();
    if (slot_ < 0) fail(path, "all " + std::to_string(k_slots) + " tenant slots are taken by live processes");
  } catch (...) {
    if (map_) ::munmap(map_, sizeof(shared_layout));
    map_ = nullptr;
    ::close(fd_);
    throw;
  }
}

shared_capacity::~shared_capacity() {
  if (!map_) return;
  // A slot still holding bytes (blocks leaked on purpose by host_resource's
  // destructor) stays counted until this process is gone.
  {
    file_lock fl(fd_);
    if (lock()) {
      if (map_->slot[slot_].bytes == 0) map_->slot[slot_] = {0, 0};
      unlock();
    }
  }
  ::munmap(map_, sizeof(shared_layout));
  ::close(fd_);
}

bool shared_capacity::lock() const noexcept {
  const int rc = pthread_mutex_lock(&map_->mu);
  if (rc == EOWNERDEAD) {
    recount(*map_);
    pthread_mutex_consistent(&map_->mu);
    return true;
  }
  if (rc != 0) {
    report_misuse("gcpressure: the lock of GCPRESSURE_HOST_SHARED='" + path_ + "' failed: " + std::strerror(rc));
    return false;
  }
  return true;
}

void shared_capacity::unlock() const noexcept { pthread_mutex_unlock(&map_->mu); }

bool shared_capacity::reserve(std::size_t n) noexcept {
  if (!lock()) return false;
  auto fits = [&] { return n <= map_->capacity && map_->used <= map_->capacity - n; };
  const bool ok = fits() || (reclaim_dead(*map_) > 0 && fits());
  if (ok) {
    map_->slot[slot_].bytes += n;  // slot first: recount() repairs `used`
    map_->used += n;
  }
  unlock();
  return ok;
}

void shared_capacity::release(std::size_t n) noexcept {
  if (!lock()) return;
  auto& s = map_->slot[slot_];
  s.bytes -= std::min<std::uint64_t>(s.bytes, n);
  map_->used -= std::min<std::uint64_t>(map_->used, n);
  unlock();
}

std::size_t shared_capacity::used() const noexcept {
  if (!lock()) return capacity_;  // unknown: report the device as full
  const auto u = static_cast<std::size_t>(map_->used);
  unlock();
  return u;
}

}  // namespace gcpressure::detail
