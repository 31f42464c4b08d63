// Note [Inside a collection] (collection_scope.hpp): the one thread-local.
#include "gcpressure/collection_scope.hpp"

namespace gcpressure {

namespace {
thread_local int t_depth = 0;
}  // namespace

bool in_collection() noexcept { return t_depth > 0; }

void enter_collection() noexcept { ++t_depth; }

bool leave_collection() noexcept {
  if (t_depth == 0) return false;
  --t_depth;
  return true;
}

}  // namespace gcpressure
