// shared_capacity.hpp (internal) — one simulated device capacity shared by
// several processes' host_resources through a small memory-mapped file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gcpressure::detail {

struct shared_layout;

// Note [Shared simulated capacity]
// GCPRESSURE_HOST_SHARED=<file> makes the host backend's simulated device a
// device that other processes use too, so that the "other tenants" logic
// (limits of available memory, the policy's device-free headroom) runs in CI
// without a GPU. The file holds the capacity, the bytes in use and one slot
// (pid, bytes) per host_resource that uses it, behind a process-shared
// *robust* mutex. POSIX only.
//
// A process that dies holding bytes: the kernel marks the mutex's owner dead
// if it died inside the lock, and the next locker recounts `used` from the
// slots. Its slot stays counted until a tenant needs the room: an allocation
// that does not fit, and every open, first reclaim the slots of processes
// that no longer exist (kill(pid, 0)). So a dead tenant's bytes count as used
// until then (memory_info shows them), never for ever. Limits, honestly: pids
// are those of one pid namespace (a container elsewhere would see foreign
// pids as dead, so do not share the file across namespaces); a reused pid
// keeps a dead slot counted until that process ends too; a file whose every
// user is gone (or from before a reboot) is reset by the next open. The first
// opener sets the capacity; one that asks for another fails with an error
// naming both (remove the file to start over). A file that is not ours is
// never modified: opening it fails. A resource is not for use across fork()
// (the child would draw on the parent's slot; open a new one in the child).
// With several host devices (GCPRESSURE_DEVICES), device d > 0 shares the
// file "<path>.<d>": each simulated device has its own capacity.
class shared_capacity {
 public:
  // Opens (creating if needed) the file at `path` and claims a slot. Throws
  // logic_error naming GCPRESSURE_HOST_SHARED and the path on any failure.
  shared_capacity(const std::string& path, std::size_t capacity);
  ~shared_capacity();
  shared_capacity(const shared_capacity&) = delete;
  shared_capacity& operator=(const shared_capacity&) = delete;

  // Takes `n` bytes if they fit in what all tenants left. Thread-safe.
  bool reserve(std::size_t n) noexcept;
  void release(std::size_t n) noexcept;
  // Bytes all tenants hold (dead ones included until reclaimed). Thread-safe.
  std::size_t used() const noexcept;
  std::size_t capacity() const noexcept { return capacity_; }
  const std::string& path() const noexcept { return path_; }

 private:
  bool lock() const noexcept;
  void unlock() const noexcept;

  std::string path_;
  std::size_t capacity_ = 0;
  shared_layout* map_ = nullptr;
  int fd_ = -1;
  int slot_ = -1;
};

}  // namespace gcpressure::detail
