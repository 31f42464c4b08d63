// gcpressure/config.hpp — the options table (mimalloc's src/util/options.c is
// the model): one row per option with its name, kind, range, default and
// target field, one parser per kind, and set_option() — the one way text
// becomes an option, for every entry point (the GCPRESSURE_* variables, the C
// API's gcpressure_options_set, forward_loop's flags, the bindings).
//
// Sizes accept plain bytes and suffixes: K/KB/KiB, M/MB/MiB, G/GB/GiB,
// T/TB/TiB (all binary: 4G == 4GB == 4GiB; blanks allowed: "64 MB"), and for
// the limits a percentage of device memory ("80%") or of the memory available
// to this process ("80%avail": Note [Limits of available memory]).
// A bad value throws logic_error "gcpressure: invalid value for WHAT: 'TEXT'
// (REASON)", WHAT naming the option as the entry point spells it
// (GCPRESSURE_HARD_LIMIT, --hard-limit, hard_limit); TEXT and REASON are the
// same at every entry point (Note [One error per bad value]).
//
// Note [The environment is the default layer]
// Precedence, lowest first: the built-in default, the GCPRESSURE_* variable,
// the option a program sets explicitly (as PYTORCH_CUDA_ALLOC_CONF and
// CUDA.jl's variables work). So a user can retune any program without
// rebuilding it, and a program that pins a value keeps it. "Left unset" must
// be representable to do this: `options` holds std::optional fields, and
// resolve_config() merges the three layers. The environment is read in this
// file only (config_from_env); the C API, the Boehm heap, the runtime
// embeddings and the Python package get it through resolve_config() or
// gcpressure_create. Two programs read it through config_from_env() as their
// own default layer and then apply their own explicit settings over it:
// forward_loop (its flags) and the PyTorch plug-in (gcp_torch_init /
// gcp_torch_set_option); neither parses a GCPRESSURE_* value itself.
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

// One vocabulary for backends, everywhere (variables, flags, the C API, the
// bindings):
//   auto        cuda_async when a CUDA device is usable, host otherwise
//   host        a simulated device in host memory
//   cuda        cudaMalloc / cudaFree (alias: cuda_sync)
//   cuda_async  cudaMallocAsync / cudaFreeAsync (stream-ordered pool)
// Case-insensitive, and '-' may stand for '_' (Guile's symbols: cuda-async).
enum class backend_choice { automatic, host, cuda, cuda_async };

// Parses the names above (surrounding blanks ignored). Throws logic_error
// naming `what` and the value. Thread-safe.
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

inline constexpr int max_device_ordinal = 1023;

// Parses "0,1,3" (device ordinals 0..max_device_ordinal, at least one, none twice; blanks
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

// What an option's text is, and so which parser reads it (one per kind).
enum class option_kind {
  size,      // bytes, 512MiB, 4G, 80%, 80%avail          -> size_spec
  bytes,     // bytes, 512MiB, 4G (no percentage), in [min, max] -> std::size_t
  backend,   // parse_backend                              -> backend_choice
  policy,    // a name of policy_names()                   -> std::string
  fraction,  // a number in (min, max]                     -> double
  integer,   // a decimal integer in [min, max]            -> int
  boolean,   // 1/0, true/false, on/off, yes/no; else an error -> bool
  devices,   // parse_device_list                          -> std::vector<int>
  text,      // any text (a path)                          -> std::string
};

// One row of the options table.
struct option_info {
  const char* env;            // GCPRESSURE_HARD_LIMIT
  const char* default_value;  // as README.md's table shows it
  const char* meaning;
  const char* name;           // hard_limit: the C API's and the bindings' key
  option_kind kind;
  double min, max;            // bytes, fraction, integer: the accepted range
};
// The table, terminated by a row whose env is nullptr.
const option_info* options_table() noexcept;
// The row of `name` ("hard_limit") or of its variable ("GCPRESSURE_HARD_LIMIT");
// nullptr if none. Thread-safe.
const option_info* find_option(std::string_view name) noexcept;

// Sets the option `name` (as find_option) of `c` from `text`, with the
// row's parser and range checks. Throws logic_error: "gcpressure: unknown
// option 'NAME' (expected ...)", or the parser's message naming `what`
// (empty: the row's name) and the value. Thread-safe (on distinct configs).
void set_option(config& c, std::string_view name, std::string_view text, std::string_view what = {});
// The same into the explicit layer (the field becomes set).
void set_option(options& o, std::string_view name, std::string_view text, std::string_view what = {});
// Checks `text` as set_option would, without storing it.
void check_option(std::string_view name, std::string_view text, std::string_view what = {});

// Parsers of the kinds above, for values that are no row's (forward_loop's
// own flags use the same rules). Throw logic_error naming `what` and the text.
bool parse_bool(std::string_view text, std::string_view what);
long parse_integer(std::string_view text, std::string_view what, long min, long max);
double parse_fraction(std::string_view text, std::string_view what, double min_exclusive, double max);
// Bytes only (a percentage is an error), in [min, max].
std::size_t parse_bytes(std::string_view text, std::string_view what, std::size_t min = 1,
                        std::size_t max = std::size_t(-1));
// A policy name of policy_names() (blanks around it ignored).
std::string parse_policy(std::string_view text, std::string_view what);

// Note [Soft above hard]
// A soft limit set above the hard limit is the user's mistake, rejected at
// every entry point with this one message (device_allocator's constructor,
// set_limits of the C API and the bindings), never clamped in silence. A soft
// limit left unset follows the hard one (75% of it).
std::string soft_above_hard_message(std::size_t soft, std::size_t hard);

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
