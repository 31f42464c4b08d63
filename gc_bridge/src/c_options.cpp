// c_options.cpp — gcpressure_options over the options table: init, the
// fields into the explicit layer, gcpressure_options_set, the names, sizes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "c_api_internal.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/gcpressure.h"

using namespace gcpressure;
using gcpressure::c_detail::fail;
using gcpressure::c_detail::guarded;

namespace {

// A field of API version `v` is read only if struct_size covers it.
template <class T>
bool covers(const gcpressure_options& o, const T& field) {
  const auto end = reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&o) + sizeof field;
  return o.struct_size >= static_cast<std::size_t>(end);
}

// A C caller may store any int in an enum field; read the bits.
int backend_bits(const gcpressure_options& o) {
  std::underlying_type_t<gcpressure_backend> v;
  std::memcpy(&v, &o.backend, sizeof v);
  return static_cast<int>(v);
}

// Note [Option strings live as long as the process]
// gcpressure_options is a plain struct with no destructor, so the strings
// gcpressure_options_set stores in it cannot be owned by it: one copy of
// each distinct value is kept for the process's life (a program sets a few).
const char* intern(const std::string& s) {
  static std::mutex mu;
  static std::set<std::string>* const pool = new std::set<std::string>;
  std::lock_guard<std::mutex> lk(mu);
  return pool->insert(s).first->c_str();
}

gcpressure_backend to_c(backend_choice b) {
  switch (b) {
    case backend_choice::automatic: return GCPRESSURE_BACKEND_AUTO;
    case backend_choice::host: return GCPRESSURE_BACKEND_HOST;
    case backend_choice::cuda: return GCPRESSURE_BACKEND_CUDA;
    case backend_choice::cuda_async: return GCPRESSURE_BACKEND_CUDA_ASYNC;
  }
  return GCPRESSURE_BACKEND_AUTO;
}

// `c` holds the option `name` parsed; store it in the field of `o` that
// read_options reads back.
void store(gcpressure_options& o, const std::string& name, const config& c, const std::string& text) {
  const std::string& t = text;  // limits and devices: the text as given; read_options parses it again
  if (name == "backend") o.backend = to_c(c.backend);
  else if (name == "device") o.device = c.device;
  else if (name == "devices") o.devices = intern(t);
  else if (name == "host_capacity") o.host_capacity = c.host_capacity;
  else if (name == "soft_limit") o.soft_limit = intern(t);
  else if (name == "hard_limit") o.hard_limit = intern(t);
  else if (name == "policy") o.policy = intern(c.policy);
  else if (name == "gc_budget") o.gc_budget = c.gc_budget;
  else if (name == "every_n") o.every_n = c.every_n;
  else if (name == "host_shared") o.host_shared = intern(c.host_shared);
  else if (name == "pool") o.pool = c.pool ? 1 : 0;
  else if (name == "async_release_threshold") o.async_release_threshold = c.async_release_threshold;
  else if (name == "verbose") o.verbose = c.verbose ? 1 : 0;
  else GCPRESSURE_FAIL("gcpressure_options_set: no field for option " + name);
}

}  // namespace

// Note [C options over the environment]: a field left as
// gcpressure_options_init made it (NULL, 0, device -1, BACKEND_AUTO, pool
// and verbose -1, async_release_threshold SIZE_MAX) is unset, so the
// GCPRESSURE_* variable, then the built-in default, applies. Values are
// checked by apply_options (the table's rules), naming options.FIELD.
gcpressure_status c_detail::read_options(const gcpressure_options& o, options& out) {
  switch (backend_bits(o)) {
    case GCPRESSURE_BACKEND_AUTO: break;
    case GCPRESSURE_BACKEND_HOST: out.backend = backend_choice::host; break;
    case GCPRESSURE_BACKEND_CUDA: out.backend = backend_choice::cuda; break;
    case GCPRESSURE_BACKEND_CUDA_ASYNC: out.backend = backend_choice::cuda_async; break;
    default:
      (void)parse_backend(std::to_string(backend_bits(o)), "options.backend");  // throws the one message
  }
  if (o.device != -1) out.device = o.device;
  if (o.host_capacity) out.host_capacity = o.host_capacity;
  if (o.soft_limit) out.soft_limit = parse_size(o.soft_limit, "options.soft_limit");
  if (o.hard_limit) out.hard_limit = parse_size(o.hard_limit, "options.hard_limit");
  if (o.policy) out.policy = o.policy;
  if (o.gc_budget != 0) out.gc_budget = o.gc_budget;  // NaN included: apply_options rejects it
  if (o.every_n != 0) out.every_n = o.every_n;
  if (covers(o, o.devices) && o.devices) out.devices = parse_device_list(o.devices, "options.devices");
  if (covers(o, o.verbose)) {
    if (o.host_shared) out.host_shared = o.host_shared;
    if (o.pool != -1) out.pool = parse_bool(std::to_string(o.pool), "options.pool");
    if (o.async_release_threshold != SIZE_MAX) out.async_release_threshold = o.async_release_threshold;
    if (o.verbose != -1) out.verbose = parse_bool(std::to_string(o.verbose), "options.verbose");
  }
  return GCPRESSURE_OK;
}

extern "C" {

void gcpressure_options_init(gcpressure_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->backend = GCPRESSURE_BACKEND_AUTO;
  o->device = -1;  // unset: GCPRESSURE_DEVICE, else 0
  o->collector = GCPRESSURE_COLLECTOR_CALLBACKS;
  o->pool = -1;
  o->async_release_threshold = SIZE_MAX;
  o->verbose = -1;
}

gcpressure_status gcpressure_options_set(gcpressure_options* o, const char* name, const char* value) {
  if (!o || !name || !value) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_options_set: null options, name or value");
  if (o->struct_size < offsetof(gcpressure_options, collector) + sizeof(o->collector) || o->struct_size > 4096)
    return fail(GCPRESSURE_ERR_INVALID, "gcpressure_options_set: options.struct_size is wrong; call "
                                        "gcpressure_options_init first");
  return guarded([&]() -> gcpressure_status {
    config c;
    set_option(c, name, value, name);  // throws the table's message: unknown name or bad value
    const std::string key = find_option(name)->name;
    const bool v5 = key == "host_shared" || key == "pool" || key == "async_release_threshold" || key == "verbose";
    if (v5 && !covers(*o, o->verbose))
      return fail(GCPRESSURE_ERR_INVALID, "gcpressure_options_set: option '" + key +
                                              "' needs API version 5's gcpressure_options (rebuild against it)");
    store(*o, key, c, value);
    return GCPRESSURE_OK;
  });
}

const char* const* gcpressure_option_names(void) {
  // Built once and kept for the process (the C API hands out its pointer);
  // the static holds the vector itself, so it stays reachable (LeakSanitizer
  // reported the 24-byte vector as leaked when only its data() was kept).
  static const std::vector<const char*>* const names = [] {
    auto* v = new std::vector<const char*>;
    for (const option_info* r = options_table(); r->env; ++r) v->push_back(r->name);
    v->push_back(nullptr);
    return v;
  }();
  return names->data();
}

gcpressure_status gcpressure_parse_size(const char* text, size_t device_total, size_t* bytes) {
  if (!text || !bytes) return fail(GCPRESSURE_ERR_INVALID, "gcpressure_parse_size: null text or out pointer");
  return guarded([&]() -> gcpressure_status {
    if (device_total == 0) {
      *bytes = parse_bytes(text, "size");
      return GCPRESSURE_OK;
    }
    const size_spec s = parse_size(text, "size");
    if (s.of_available)
      return fail(GCPRESSURE_ERR_INVALID, "gcpressure: invalid value for size: '" + std::string(text) +
                                              "' (N%avail follows the memory at run time; set it as an option)");
    *bytes = s.resolve(device_total);
    return GCPRESSURE_OK;
  });
}

}  // extern "C"
