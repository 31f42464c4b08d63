// gcpressure/config.hpp — the options table (mimalloc style).
//
// Every option has a default, a GCPRESSURE_* environment variable and a field
// here. Sizes accept plain bytes and suffixes: K/KB/KiB, M/MB/MiB, G/GB/GiB,
// T/TB/TiB (all binary: 4G == 4GiB), a percentage of device memory ("80%"),
// or a percentage of the memory available to this process ("80%avail":
// Note [Limits of available memory]).
// A bad value throws logic_error naming the variable and the value.
//
// Note [The environment is the default layer]
// Precedence, lowest first: the built-in default, the GCPRESSURE_* variable,
// the option a program sets explicitly (as PYTORCH_CUDA_ALLOC_CONF and
// CUDA.jl's variables work). So a user can retune any program without
// rebuilding it, and a program that pins a value keeps it. "Left unset" must
// be representable to do this: `options` holds std::optional fields, and
// resolve_config() merges the three layers. Every binding (the Boehm heap,
// the C API, the runtime embeddings) builds an `options` from what its caller
// gave and calls resolve_config(); none reads the environment by itself.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gcpressure/types.hpp"

namespace gcpressure {

// Note [Limits of available memory]
// Other processes (tenants) may share the device. "80%" is 80% of the
// device's total, fixed at start; "80%avail" is 80% of the memory available
// to this process: the device's free memory plus what this allocator has
// reserved itself (its own bytes are not taken from it). The allocator
// re-resolves such a limit at a bounded rate (device_allocator::
// refresh_limits), so when another tenant takes memory mid-run the limit, and
// with it the policy's young budget, shrinks before an allocation fails.

// A size given as bytes or as a percentage of device memory.
struct size_spec {
  std::size_t bytes = 0;
  double percent = -1;  // >= 0: percentage of device total; then `bytes` is unused
  // With percent >= 0: a percentage of the available memory ("80%avail"),
  // not of the device total.
  bool of_available = false;
  bool is_set() const noexcept { return percent >= 0 || bytes > 0; }
  // Bytes for a device of `total` bytes (for "%avail": `total` is the
  // available memory); 0 when unset.
  std::size_t resolve(std::size_t total) const noexcept;
  std::string to_string() const;  // "512.00 MiB", "80%", "80%avail" or "unset"
};

// Parses "512MiB", "4GiB", "4G", "80%", "80%avail", "1048576". Throws
// logic_error naming `what` (e.g. the variable) and the value on bad input.
// Thread-safe.
size_spec parse_size(std::string_view text, std::string_view what = "size");

// The size of the simulated device of the host backend unless configured:
// the one default every binding, example and benchmark uses.
inline constexpr std::size_t default_host_capacity = std::size_t{16} << 30;

// One vocabulary for backends, everywhere (variables, flags, the C API):
//   auto        cuda_async when a CUDA device is usable, host otherwise
//   host        a simulated device in host memory
//   cuda        cudaMalloc / cudaFree
//   cuda_async  cudaMallocAsync / cudaFreeAsync (stream-ordered pool)
enum class backend_choice { automatic, host, cuda, cuda_async };

// Parses auto | host | cuda | cuda_async (case-insensitive, surrounding
// blanks ignored). Throws logic_error naming `what` and the value. Thread-safe.
backend_choice parse_backend(std::string_view text, std::string_view what = "backend");
// "auto", "host", "cuda" or "cuda_async". Thread-safe; finalizer-safe.
const char* to_string(backend_choice b) noexcept;

struct config {
  backend_choice backend = backend_choice::automatic;  // GCPRESSURE_BACKEND: auto|host|cuda|cuda_async
  int device = 0;                                       // GCPRESSURE_DEVICE
  std::vector<int> devices;                             // GCPRESSURE_DEVICES: "0,1" (empty: {device})
  std::size_t host_capacity = default_host_capacity;    // GCPRESSURE_HOST_CAPACITY (simulated device size)
  std::string host_shared;                              // GCPRESSURE_HOST_SHARED: file of a capacity shared by processes ("" = private)
  size_spec soft_limit;                                 // GCPRESSURE_SOFT_LIMIT (unset: 75% of the hard limit)
  size_spec hard_limit;                                 // GCPRESSURE_HARD_LIMIT (unset: device total)
  bool pool = true;                                     // GCPRESSURE_POOL: 0|1
  std::size_t async_release_threshold = 0;              // GCPRESSURE_ASYNC_RELEASE_THRESHOLD
  std::string policy = "pressure";                      // GCPRESSURE_POLICY
  double gc_budget = 0.05;                              // GCPRESSURE_GC_BUDGET: fraction of wall time
  int every_n = 1;                                      // GCPRESSURE_EVERY_N (every_iteration policy)
  bool verbose = false;                                 // GCPRESSURE_VERBOSE: 0|1

  // The devices one policy serves (Note [One policy, N devices] in
  // policy.hpp): `devices` when set, else {device}. Thread-safe.
  std::vector<int> device_list() const;
};

// Parses "0,1,3" (device ordinals 0..1023, at least one, none twice; blanks
// around items ignored). Throws logic_error naming `what` and the value.
// Thread-safe.
std::vector<int> parse_device_list(std::string_view text, std::string_view what = "devices");

// Reads every GCPRESSURE_* variable over `base`. Throws logic_error on a bad
// value. Warns once per name on stderr about a GCPRESSURE_* variable that no
// option has (a misspelling), with the closest known name. Thread-safe as far
// as the environment is (nothing may setenv concurrently); not finalizer-safe.
config config_from_env(config base = {});

// What a program sets explicitly; std::nullopt (the default of every field)
// means "unset": the GCPRESSURE_* variable, then the built-in default applies.
// See Note [The environment is the default layer].
struct options {
  std::optional<backend_choice> backend;
  std::optional<int> device;         // one device; clears a GCPRESSURE_DEVICES list
  std::optional<std::vector<int>> devices;
  std::optional<std::size_t> host_capacity;
  std::optional<std::string> host_shared;
  std::optional<size_spec> soft_limit;
  std::optional<size_spec> hard_limit;
  std::optional<bool> pool;
  std::optional<std::size_t> async_release_threshold;
  std::optional<std::string> policy;
  std::optional<double> gc_budget;
  std::optional<int> every_n;
  std::optional<bool> verbose;
};

// The fields `o` sets, over `base`. Checks them as strictly as the variables
// (a bad value throws logic_error naming "options.<field>"). Thread-safe.
config apply_options(const options& o, config base);

// Built-in defaults < GCPRESSURE_* variables < `o`: the configuration every
// binding uses. Throws logic_error on a bad variable or option. Thread-safety
// as config_from_env().
config resolve_config(const options& o = {});

// One row of the options table, for documentation and `--help` output.
struct option_info {
  const char* env;
  const char* default_value;
  const char* meaning;
};
// The table, terminated by a row whose env is nullptr.
const option_info* options_table() noexcept;

std::string format_bytes(std::size_t bytes);  // "1.50 GiB"

namespace detail {
// One warning per GCPRESSURE_* name in the environment that is neither an
// option nor one of the project's tool/test variables, e.g.
// "unknown variable GCPRESSURE_HARD_LIMT ignored (did you mean
// GCPRESSURE_HARD_LIMIT?)". Thread-safety as config_from_env().
std::vector<std::string> unknown_env_warnings();
// The known name closest to `name` (edit distance), or "" if none is close.
std::string closest_option_name(std::string_view name);
}  // namespace detail

}  // namespace gcpressure
