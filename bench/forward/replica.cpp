// replica.cpp — one replica of the forward loop's model (replica.hpp, Note
// [Replicas]): its initialisation, its forward pass and its read-back. See
// Note [What is GC-visible here] in loop.cpp.
#ifndef GC_THREADS
#define GC_THREADS 1  // as in gc_bridge: must precede gc.h
#endif
#include <gc/gc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "gcpressure/error.hpp"
#include "replica.hpp"

namespace fwd::detail {

namespace {

// `count` small host GC objects of 16..128 bytes, linked into a short list
// (boxed values, closures, tuples of a real runtime's iteration), dropped.
void host_garbage(int count) {
  static constexpr std::size_t sizes[] = {16, 24, 32, 48, 64, 80, 96, 128};
  void* prev = nullptr;
  for (int i = 0; i < count; ++i) {
    void* p = GC_MALLOC(sizes[i & 7]);
    if (!p) throw std::bad_alloc();
    *static_cast<void**>(p) = prev;
    prev = p;
  }
}

}  // namespace

replica::~replica() {
  if (roots) GC_FREE(roots);
}

std::size_t init_model(replica& rp, const options& o, std::size_t hard_limit) {
  const int d = o.d, n = o.batch, L = o.layers;
  const std::size_t act_bytes = static_cast<std::size_t>(d) * n * sizeof(float);
  const std::size_t model_bytes =
      act_bytes + static_cast<std::size_t>(L) * (static_cast<std::size_t>(d) * d + d) * sizeof(float);
  const std::size_t root_bytes = sizeof(model_roots) + sizeof(darray*) * static_cast<std::size_t>(2 * L);
  rp.roots = static_cast<model_roots*>(GC_MALLOC_UNCOLLECTABLE(root_bytes));
  if (!rp.roots) throw std::bad_alloc();
  std::memset(rp.roots, 0, root_bytes);
  // xorshift64*: the H200 model has 134 M weights, and a matrix of runs
  // initialises it once per run (mt19937_64 + a distribution took ~1 s).
  std::uint64_t state = o.seed * 0x9e3779b97f4a7c15ull + 1;
  auto uniform = [&state](float lo, float hi) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    const auto bits = static_cast<std::uint32_t>((state * 0x2545f4914f6cdd1dull) >> 40);  // 24 bits
    return lo + (hi - lo) * static_cast<float>(bits) * (1.0f / 16777216.0f);
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto wdist = [&] { return uniform(-scale, scale); };
  auto xdist = [&] { return uniform(0.f, 1.f); };
  auto bdist = [&] { return uniform(-0.01f, 0.05f); };
  std::vector<float> host(static_cast<std::size_t>(d) * std::max(d, n));
  compute& c = *rp.comp;
  rp.roots->x = rp.arr->make(d, n);
  for (std::size_t i = 0; i < static_cast<std::size_t>(d) * n; ++i) host[i] = xdist();
  c.upload(ptr(rp.roots->x), host.data(), act_bytes);
  for (int l = 0; l < L; ++l) {
    darray* W = rp.roots->items[l] = rp.arr->make(d, d);
    for (std::size_t i = 0; i < static_cast<std::size_t>(d) * d; ++i) host[i] = wdist();
    c.upload(ptr(W), host.data(), static_cast<std::size_t>(d) * d * sizeof(float));
    darray* b = rp.roots->items[L + l] = rp.arr->make(d, 1);
    for (int i = 0; i < d; ++i) host[static_cast<std::size_t>(i)] = bdist();
    c.upload(ptr(b), host.data(), static_cast<std::size_t>(d) * sizeof(float));
  }
  c.wait();
  rp.wl = make_workload(o, workload_context{*rp.arr, c, hard_limit, L, act_bytes});
  return model_bytes;
}

void forward_pass(replica& rp, const options& o, int it, bool last, result& r) {
  const int d = o.d, n = o.batch, L = o.layers;
  arrays& arr = *rp.arr;
  compute& c = *rp.comp;
  // In-flight arrays are locals: on the stack, so GC-visible (Note [What is GC-visible here]).
  darray* h = rp.roots->x;
  darray* t = nullptr;
  darray* y = nullptr;
  auto drop_input = [&] {
    if (h != rp.roots->x) arr.died(h);
  };
  try {
    rp.wl->begin_iteration(it);
    for (int l = 0; l < L; ++l) {
      const darray* W = rp.roots->items[l];
      const darray* b = rp.roots->items[L + l];
      t = arr.make(d, n);  // W*x: the broadcast's temporary
      c.gemm(ptr(W), ptr(h), ptr(t), d, n);
      y = arr.make(d, n);  // relu.(t .+ b)
      c.bias_relu(ptr(t), ptr(b), ptr(y), d, n);
      rp.wl->after_layer(it, l, t, y);
      arr.died(t);
      drop_input();
      t = nullptr;
      h = y;
      y = nullptr;
      host_garbage(o.host_allocs / L + (l < o.host_allocs % L ? 1 : 0));
    }
    rp.wl->end_iteration(it);
    if (last) rp.roots->out = h;  // read back by checksum(), after the sync
    else drop_input();
  } catch (const gcp::out_of_memory& e) {
    ++rp.ooms;
    ++r.ooms;
    if (r.first_oom.empty()) r.first_oom = e.what(), r.first_oom_iteration = it;
    arr.died(t);
    arr.died(y);
    drop_input();
  }
}

void checksum(replica& rp, int d) {
  if (!rp.roots->out) return;
  std::vector<float> col(static_cast<std::size_t>(d));
  rp.comp->download(col.data(), ptr(rp.roots->out), col.size() * sizeof(float));
  rp.checksum = 0;
  for (float v : col) rp.checksum += v;
  rp.arr->died(rp.roots->out);
  rp.roots->out = nullptr;
}

void release(replica& rp, int layers) {
  rp.wl->release();
  if (rp.arr->oracle()) {
    rp.arr->died(rp.roots->x);
    for (int i = 0; i < 2 * layers; ++i) rp.arr->died(rp.roots->items[i]);
  }
  GC_FREE(rp.roots);
  rp.roots = nullptr;
}

}  // namespace fwd::detail
