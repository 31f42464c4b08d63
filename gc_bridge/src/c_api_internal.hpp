// c_api_internal.hpp — what the C API's two files share (c_api.cpp: handles
// and calls; c_options.cpp: gcpressure_options and the options table).
#pragma once

#include <string>
#include <utility>

#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/gcpressure.h"

namespace gcpressure::c_detail {

// Sets the calling thread's last error; returns `s`.
gcpressure_status fail(gcpressure_status s, std::string msg);

inline gcpressure_status status_of(detail::error_class k) noexcept {
  switch (k) {
    case detail::error_class::invalid: return GCPRESSURE_ERR_INVALID;
    case detail::error_class::out_of_memory: return GCPRESSURE_ERR_OOM;
    case detail::error_class::cuda: return GCPRESSURE_ERR_CUDA;
    case detail::error_class::internal: return GCPRESSURE_ERR_INTERNAL;
  }
  return GCPRESSURE_ERR_INTERNAL;
}

// Note [Errors at a C boundary]
template <class F>
gcpressure_status guarded(F&& f) noexcept {
  return detail::call_at_c_boundary(std::forward<F>(f), [](detail::caught_error e) {
    return fail(status_of(e.kind), std::move(e.message));
  });
}

// The fields of `o` that are set, into the explicit layer `out`
// (Note [C options over the environment]). Throws logic_error on a bad
// field, naming it options.FIELD.
gcpressure_status read_options(const gcpressure_options& o, options& out);

}  // namespace gcpressure::c_detail
