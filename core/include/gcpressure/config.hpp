// gcpressure/config.hpp — the options table (mimalloc style).
//
// Every option has a default, a GCPRESSURE_* environment variable and a field
// here. Sizes accept plain bytes and suffixes: K/KB/KiB, M/MB/MiB, G/GB/GiB,
// T/TB/TiB (all binary: 4G == 4GiB), or a percentage of device memory ("80%").
// A bad value throws logic_error naming the variable and the value.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "gcpressure/types.hpp"

namespace gcpressure {

// A size given as bytes or as a percentage of device memory.
struct size_spec {
  std::size_t bytes = 0;
  double percent = -1;  // >= 0: percentage of device total; then `bytes` is unused
  bool is_set() const noexcept { return percent >= 0 || bytes > 0; }
  // Bytes for a device of `total` bytes; 0 when unset.
  std::size_t resolve(std::size_t total) const noexcept;
  std::string to_string() const;
};

// Parses "512MiB", "4GiB", "4G", "80%", "1048576". Throws logic_error naming
// `what` (e.g. the variable) and the value on bad input. Thread-safe.
size_spec parse_size(std::string_view text, std::string_view what = "size");

enum class backend_choice { automatic, host, cuda, cuda_async };

struct config {
  backend_choice backend = backend_choice::automatic;  // GCPRESSURE_BACKEND: auto|host|cuda|cuda_async
  int device = 0;                                       // GCPRESSURE_DEVICE
  std::size_t host_capacity = std::size_t{16} << 30;    // GCPRESSURE_HOST_CAPACITY (simulated device size)
  size_spec soft_limit;                                 // GCPRESSURE_SOFT_LIMIT (unset: 75% of the hard limit)
  size_spec hard_limit;                                 // GCPRESSURE_HARD_LIMIT (unset: device total)
  bool pool = true;                                     // GCPRESSURE_POOL: 0|1
  std::size_t async_release_threshold = 0;              // GCPRESSURE_ASYNC_RELEASE_THRESHOLD
  std::string policy = "pressure";                      // GCPRESSURE_POLICY
  double gc_budget = 0.05;                              // GCPRESSURE_GC_BUDGET: fraction of wall time
  int every_n = 1;                                      // GCPRESSURE_EVERY_N (every_iteration policy)
  bool verbose = false;                                 // GCPRESSURE_VERBOSE: 0|1
};

// Reads every GCPRESSURE_* variable over `base`. Throws logic_error on a bad
// value. Thread-safe (reads the environment only).
config config_from_env(config base = {});

// One row of the options table, for documentation and `--help` output.
struct option_info {
  const char* env;
  const char* default_value;
  const char* meaning;
};
// The table, terminated by a row whose env is nullptr.
const option_info* options_table() noexcept;

std::string format_bytes(std::size_t bytes);  // "1.50 GiB"

}  // namespace gcpressure
