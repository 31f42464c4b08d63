// forward_loop_lib.cpp — see forward_loop_lib.hpp.
//
// Note [What is GC-visible here]
// Boehm finds objects from the stacks, static data and other GC objects; it
// does not scan malloc'd memory (std::vector storage, host_resource "device"
// memory). So every pointer that must keep something alive lives in a GC
// object or on the stack: the model's arrays and the host heap's chains hang
// off GC_MALLOC_UNCOLLECTABLE roots, each device array is a small GC_MALLOC'd
// `darray` pointing at its buffer handle (as a CuArray points at its
// storage), and in-flight arrays are locals.
#ifndef GC_THREADS
#define GC_THREADS 1  // as in gc_bridge: must precede gc.h
#endif
#include <gc/gc.h>

#include "forward_loop_lib.hpp"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <thread>

#include <time.h>

#include "gcpressure/allocator.hpp"
#include "gcpressure/boehm.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

#ifdef GCPRESSURE_HAVE_CUDA
#include "forward_loop_cuda.hpp"
#endif

namespace fwd {

namespace gcp = gcpressure;
namespace boehm = gcpressure::boehm;
using clock_type = std::chrono::steady_clock;

namespace {

double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

bool is_policy(const std::string& p) {
  for (const char* const* n = gcp::policy_names(); *n; ++n)
    if (p == *n) return true;
  return false;
}

}  // namespace

// --- command line ---------------------------------------------------------------

std::string usage() {
  return
      "usage: forward_loop [--backend host|cuda|cuda_sync]\n"
      "                    [--policy pressure|at_limit|every_iteration|cudajl|dotnet|explicit_free]\n"
      "                    [--iters N] [--layers N] [--d N] [--batch N] [--host-heap-mib N]\n"
      "                    [--hard-limit SIZE] [--soft-limit SIZE] [--trace FILE.csv] [--json] [--quiet]\n"
      "                    [--host-allocs N] [--host-capacity SIZE] [--gc-budget F] [--every-n N]\n"
      "                    [--max-seconds S] [--seed N] [--verbose] [--help]\n"
      "\n"
      "A Flux-style forward pass (layers x Dense y = relu.(W*x .+ b)) whose arrays are GC-owned\n"
      "device buffers that the loop drops, inside a simulated runtime with a live host heap.\n"
      "\n"
      "  --backend         cuda (cudaMallocAsync upstream; default when a GPU is usable),\n"
      "                    cuda_sync (cudaMalloc upstream) or host (simulated device; CPU SGEMM)\n"
      "  --policy          collection policy (default pressure); explicit_free frees every array\n"
      "                    itself when it dies (the oracle)\n"
      "  --iters N         iterations (default 2000)\n"
      "  --layers/--d/--batch  model shape (default 4 layers, d=256, batch=32)\n"
      "  --host-heap-mib N live host heap of 64-byte linked GC objects (default 0)\n"
      "  --host-allocs N   small host GC allocations per iteration, all garbage (default 300)\n"
      "  --hard-limit SIZE device memory limit: bytes, 512MiB-style or % of device memory\n"
      "                    (default 50% on cuda; 256MiB on host)\n"
      "  --soft-limit SIZE the policy's target (default 75% of the hard limit)\n"
      "  --host-capacity SIZE  simulated device size on the host backend (default 8GiB)\n"
      "  --gc-budget F     fraction of wall time collections may take (default 0.05)\n"
      "  --every-n N       every_iteration: collect every N iterations (default 1)\n"
      "  --max-seconds S   stop after S seconds of loop time (reported as stopped_early)\n"
      "  --trace FILE.csv  one row per iteration: iteration,live,reserved,collections,gc_seconds\n"
      "  --json            print one JSON object as the last line\n"
      "  --quiet           no per-iteration lines\n"
      "  --verbose         the policy's per-collection lines on stderr\n"
      "\n"
      "GCPRESSURE_* environment variables (backend, limits, policy, budget, every_n, verbose,\n"
      "host capacity) set defaults; flags override them.\n";
}

gcp::size_spec default_hard_limit(bool cuda) {
  gcp::size_spec s;
  if (cuda) s.percent = 50;
  else s.bytes = std::size_t{256} << 20;
  return s;
}

namespace {

long to_long(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE) throw usage_error(flag + ": expected an integer, got '" + v + "'");
  if (x < lo || x > hi)
    throw usage_error(flag + ": " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

double to_double(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo && x <= hi))
    throw usage_error(flag + ": expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                      v + "'");
  return x;
}

gcp::size_spec to_size(const std::string& flag, const std::string& v) {
  try {
    return gcp::parse_size(v, flag);
  } catch (const gcp::logic_error& e) {
    throw usage_error(e.what());
  }
}

}  // namespace

options parse_args(int argc, char** argv, bool* help, options o) {
  if (help) *help = false;
  // Defaults from the library's environment variables, where set.
  gcp::config c;
  try {
    c = gcp::config_from_env();
  } catch (const gcp::logic_error& e) {
    throw usage_error(e.what());
  }
  auto set = [](const char* name) { return std::getenv(name) != nullptr; };
  if (set("GCPRESSURE_BACKEND")) {
    switch (c.backend) {
      case gcp::backend_choice::automatic: o.backend.clear(); break;
      case gcp::backend_choice::host: o.backend = "host"; break;
      case gcp::backend_choice::cuda: o.backend = "cuda_sync"; break;
      case gcp::backend_choice::cuda_async: o.backend = "cuda"; break;
    }
  }
  if (set("GCPRESSURE_HOST_CAPACITY")) o.host_capacity = c.host_capacity;
  if (set("GCPRESSURE_HARD_LIMIT")) o.hard_limit = c.hard_limit;
  if (set("GCPRESSURE_SOFT_LIMIT")) o.soft_limit = c.soft_limit;
  if (set("GCPRESSURE_POLICY")) o.policy = c.policy;
  if (set("GCPRESSURE_GC_BUDGET")) o.gc_budget = c.gc_budget;
  if (set("GCPRESSURE_EVERY_N")) o.every_n = c.every_n;
  if (set("GCPRESSURE_VERBOSE")) o.verbose = c.verbose;

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    bool has_inline = false;
    if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    auto value = [&]() -> std::string {
      if (has_inline) return v;
      if (i + 1 >= argc) throw usage_error(a + ": missing value");
      return argv[++i];
    };
    auto flag_only = [&] {
      if (has_inline) throw usage_error(a + " takes no value");
    };
    if (a == "--help" || a == "-h") {
      flag_only();
      if (help) *help = true;
    } else if (a == "--backend") {
      o.backend = value();
      if (o.backend == "auto") o.backend.clear();
      else if (o.backend == "cuda_async") o.backend = "cuda";
      else if (o.backend != "host" && o.backend != "cuda" && o.backend != "cuda_sync")
        throw usage_error("--backend: expected host, cuda or cuda_sync, got '" + o.backend + "'");
    } else if (a == "--policy") {
      o.policy = value();
    } else if (a == "--iters") {
      o.iters = static_cast<int>(to_long(a, value(), 1, 100000000));
    } else if (a == "--layers") {
      o.layers = static_cast<int>(to_long(a, value(), 1, 1000));
    } else if (a == "--d") {
      o.d = static_cast<int>(to_long(a, value(), 1, 65536));
    } else if (a == "--batch") {
      o.batch = static_cast<int>(to_long(a, value(), 1, 1 << 20));
    } else if (a == "--host-heap-mib") {
      o.host_heap_mib = static_cast<std::size_t>(to_long(a, value(), 0, 1 << 20));
    } else if (a == "--host-allocs") {
      o.host_allocs = static_cast<int>(to_long(a, value(), 0, 1 << 24));
    } else if (a == "--hard-limit") {
      o.hard_limit = to_size(a, value());
    } else if (a == "--soft-limit") {
      o.soft_limit = to_size(a, value());
    } else if (a == "--host-capacity") {
      o.host_capacity = to_size(a, value()).bytes;
      if (!o.host_capacity) throw usage_error("--host-capacity: must be bytes, not a percentage");
    } else if (a == "--gc-budget") {
      o.gc_budget = to_double(a, value(), 1e-6, 1.0);
    } else if (a == "--every-n") {
      o.every_n = static_cast<int>(to_long(a, value(), 1, 1 << 30));
    } else if (a == "--max-seconds") {
      o.max_seconds = to_double(a, value(), 0, 1e9);
    } else if (a == "--seed") {
      o.seed = static_cast<std::uint64_t>(to_long(a, value(), 0, 0x7fffffffL));
    } else if (a == "--trace") {
      o.trace = value();
    } else if (a == "--json") {
      flag_only();
      o.json = true;
    } else if (a == "--quiet") {
      flag_only();
      o.quiet = true;
    } else if (a == "--verbose") {
      flag_only();
      o.verbose = true;
    } else {
      throw usage_error("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
  if (!is_policy(o.policy))
    throw usage_error("--policy: unknown policy '" + o.policy +
                      "' (expected pressure, at_limit, every_iteration, cudajl, dotnet or explicit_free)");
  return o;
}

// --- the simulated runtime's live host heap --------------------------------------

namespace {

// 56 requested bytes are a 64-byte Boehm object (one extra byte is added for
// interior pointers, then rounded to 16-byte granules); measured with GC_size.
struct heap_node {
  heap_node* next;
  heap_node* other;        // an earlier node of the same chain: the graph is not a plain list
  std::uintptr_t data[5];  // small integers: never mistaken for pointers
};
static_assert(sizeof(heap_node) == 56);

constexpr std::size_t chain_length = 4096;

}  // namespace

host_heap::host_heap(std::size_t mib) : mib_(mib) {
  boehm::init();
  const auto t0 = clock_type::now();
  if (mib == 0) return;
  // Object size as Boehm rounds it (64 with interior pointers on).
  void* probe = GC_MALLOC(sizeof(heap_node));
  if (!probe) throw std::bad_alloc();
  const std::size_t obj = GC_size(probe);
  probe = nullptr;
  const std::size_t target = mib << 20;
  const std::size_t n = target / obj;
  chains_ = (n + chain_length - 1) / chain_length;
  roots_ = static_cast<void**>(GC_MALLOC_UNCOLLECTABLE(chains_ * sizeof(void*)));
  if (!roots_) throw std::bad_alloc();
  // Nothing here is garbage: collections while building would only re-mark
  // a growing heap over and over. The caller's first collection marks it once.
  GC_disable();
  std::size_t made = 0;
  std::uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (std::size_t c = 0; c < chains_ && made < n; ++c) {
    heap_node* head = nullptr;
    heap_node* recent[8] = {};
    for (std::size_t k = 0; k < chain_length && made < n; ++k, ++made) {
      auto* node = static_cast<heap_node*>(GC_MALLOC(sizeof(heap_node)));
      if (!node) {
        GC_enable();
        throw std::bad_alloc();
      }
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      node->next = head;
      node->other = recent[rng & 7];
      for (int w = 0; w < 5; ++w) node->data[w] = (made + static_cast<std::size_t>(w)) & 0xffff;
      recent[rng & 7] = node;
      head = node;
    }
    roots_[c] = head;
  }
  GC_enable();
  objects_ = made;
  bytes_ = made * obj;
  build_seconds_ = since(t0);
}

host_heap::~host_heap() {
  if (roots_) GC_FREE(roots_);  // the chains become garbage for the next full collection
}

// --- compute -------------------------------------------------------------------------

namespace {

class compute {
 public:
  virtual ~compute() = default;
  virtual void gemm(const float* W, const float* x, float* y, int d, int n) = 0;
  virtual void bias_relu(const float* t, const float* b, float* y, int d, int n) = 0;
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void sync() = 0;
};

// Column-major y(d x n) = W(d x d) * x(d x n), four output columns at a time so
// that each column of W is read once per four (the compiler vectorises the
// inner loop). About 20 GFLOP/s on one core of the development machine.
void host_sgemm(const float* __restrict W, const float* __restrict x, float* __restrict y, int d, int n) {
  const std::size_t ld = static_cast<std::size_t>(d);
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    float* __restrict y0 = y + ld * j;
    float* __restrict y1 = y0 + ld;
    float* __restrict y2 = y1 + ld;
    float* __restrict y3 = y2 + ld;
    for (int i = 0; i < d; ++i) y0[i] = y1[i] = y2[i] = y3[i] = 0.f;
    for (int k = 0; k < d; ++k) {
      const float* __restrict w = W + ld * k;
      const float a0 = x[ld * j + k], a1 = x[ld * (j + 1) + k], a2 = x[ld * (j + 2) + k], a3 = x[ld * (j + 3) + k];
      for (int i = 0; i < d; ++i) {
        const float wi = w[i];
        y0[i] += wi * a0;
        y1[i] += wi * a1;
        y2[i] += wi * a2;
        y3[i] += wi * a3;
      }
    }
  }
  for (; j < n; ++j) {
    float* __restrict y0 = y + ld * j;
    for (int i = 0; i < d; ++i) y0[i] = 0.f;
    for (int k = 0; k < d; ++k) {
      const float* __restrict w = W + ld * k;
      const float a = x[ld * j + k];
      for (int i = 0; i < d; ++i) y0[i] += w[i] * a;
    }
  }
}

class host_compute final : public compute {
 public:
  void gemm(const float* W, const float* x, float* y, int d, int n) override { host_sgemm(W, x, y, d, n); }
  void bias_relu(const float* t, const float* b, float* y, int d, int n) override {
    const std::size_t ld = static_cast<std::size_t>(d);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < d; ++i) {
        const float v = t[ld * j + i] + b[i];
        y[ld * j + i] = v > 0.f ? v : 0.f;
      }
  }
  void upload(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void sync() override {}
};

#ifdef GCPRESSURE_HAVE_CUDA
class cuda_compute final : public compute {
 public:
  explicit cuda_compute(gcp::stream_ref s) : stream_(s), ctx_(cuda::create(s)) {}
  ~cuda_compute() override { cuda::destroy(ctx_); }
  void gemm(const float* W, const float* x, float* y, int d, int n) override { cuda::sgemm(ctx_, W, x, y, d, n); }
  void bias_relu(const float* t, const float* b, float* y, int d, int n) override {
    cuda::bias_relu(ctx_, t, b, y, d, n);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    gcp::cuda_memcpy_to_device(dst, src, bytes, stream_);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    gcp::cuda_memcpy_to_host(dst, src, bytes, stream_);
  }
  void sync() override { gcp::cuda_stream_synchronize(stream_); }

 private:
  gcp::stream_ref stream_;
  cuda::context* ctx_;
};
#endif

std::unique_ptr<compute> make_compute(bool cuda, gcp::stream_ref s) {
  if (!cuda) return std::make_unique<host_compute>();
#ifdef GCPRESSURE_HAVE_CUDA
  return std::make_unique<cuda_compute>(s);
#else
  (void)s;
  GCPRESSURE_FAIL("forward_loop: this build has no CUDA (configure with GCPRESSURE_WITH_CUDA=ON)");
#endif
}

// --- the model's arrays -------------------------------------------------------------

// A runtime's array object: a small GC host object pointing at its GC-owned
// device buffer. Dropping the darray drops the buffer.
struct darray {
  boehm::buffer* buf;
  int rows, cols;
};

darray* gc_host_object(std::size_t bytes) {
  void* p = GC_MALLOC(bytes);
  if (!p) throw std::bad_alloc();
  return static_cast<darray*>(p);
}

darray* new_array(boehm::device_heap& h, int rows, int cols, gcp::stream_ref s) {
  boehm::buffer* b = h.alloc(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(float), s);
  darray* a = gc_host_object(sizeof(darray));
  a->buf = b;
  a->rows = rows;
  a->cols = cols;
  return a;
}

float* ptr(const darray* a) { return static_cast<float*>(boehm::device_heap::data(a->buf)); }

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

// Model roots: uncollectable (scanned, never freed by the collector).
struct model_roots {
  darray* x;
  darray* items[1];  // W[0..layers), b[0..layers)
};

// Overwrites dead stack below the caller, where stale copies of dropped
// array pointers would keep their buffers alive for a conservative collector.
[[gnu::noinline]] void scrub_stack() {
  volatile char buf[32768];
  for (std::size_t i = 0; i < sizeof buf; i += 64) buf[i] = 0;
  std::memset(const_cast<char*>(buf), 0, sizeof buf);
}

// The bridge's finalizer thread may be running finalizers of the collection
// that just finished: run what is pending here too, and wait (up to 2 s) until
// the allocator's live bytes stop moving.
void settle_finalizers(gcp::device_allocator& a) {
  std::size_t last = a.live_bytes();
  int still = 0;
  for (int i = 0; i < 200 && still < 3; ++i) {
    while (GC_should_invoke_finalizers()) GC_invoke_finalizers();
    a.drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::size_t now = a.live_bytes();
    still = now == last ? still + 1 : 0;
    last = now;
  }
}

std::uint64_t total(const gcp::collection_stats& s) {
  std::uint64_t n = 0;
  for (auto k : s.by_kind) n += k;
  return n;
}

}  // namespace

// --- the loop ---------------------------------------------------------------------------

result run(const options& o, host_heap* heap, std::FILE* progress) {
  boehm::init();
  if (!is_policy(o.policy)) GCPRESSURE_FAIL("forward_loop: unknown policy '" + o.policy + "'");
  if (o.quiet) progress = nullptr;

  std::unique_ptr<host_heap> own_heap;
  if (!heap && o.host_heap_mib > 0) {
    own_heap = std::make_unique<host_heap>(o.host_heap_mib);
    heap = own_heap.get();
  }
  if (heap && heap->mib() != o.host_heap_mib)
    GCPRESSURE_FAIL("forward_loop: the host heap given holds " + std::to_string(heap->mib()) + " MiB, not " +
                    std::to_string(o.host_heap_mib));

  const bool cuda = o.backend.empty() ? gcp::cuda_available() : o.backend != "host";
  const bool oracle = o.policy == "explicit_free";

  gcp::allocator_options ao;
  ao.backend = !cuda ? gcp::backend_kind::host
                     : (o.backend == "cuda_sync" ? gcp::backend_kind::cuda : gcp::backend_kind::cuda_async);
  ao.host_capacity = o.host_capacity;
  ao.hard_limit = o.hard_limit.is_set() ? o.hard_limit : default_hard_limit(cuda);
  ao.soft_limit = o.soft_limit;
  gcp::policy_options po;
  po.gc_budget = o.gc_budget;
  po.every_n = o.every_n;
  po.verbose = o.verbose;

  result r;
  r.policy = o.policy;
  r.backend = gcp::to_string(ao.backend);
  r.iterations_requested = o.iters;
  r.layers = o.layers;
  r.d = o.d;
  r.batch = o.batch;
  r.host_allocs = o.host_allocs;
  r.host_heap_mib = o.host_heap_mib;
  r.host_heap_bytes = heap ? heap->bytes() : 0;
  r.gc_budget = o.gc_budget;

  // A clean start, outside the measurement: garbage of earlier runs (and the
  // host heap's first marking) is not this run's work.
  GC_gcollect();

  // Destruction order matters (reverse of declaration): the compute context,
  // then the device heap (its pool's blocks are ordered on the stream), then
  // the stream.
  gcp::stream_ref stream = cuda ? gcp::cuda_stream_create() : nullptr;
  struct stream_guard {
    gcp::stream_ref s;
    ~stream_guard() {
      if (s) gcp::cuda_stream_destroy(s);
    }
  } sguard{stream};
  auto dh = std::make_unique<boehm::device_heap>(ao, o.policy, po);
  gcp::device_allocator& alloc = dh->allocator();
  r.hard_limit = alloc.hard_limit();
  r.soft_limit = alloc.soft_limit();
  r.device_total = alloc.device_memory().total;
  std::unique_ptr<compute> comp = make_compute(cuda, stream);

  const int d = o.d, n = o.batch, L = o.layers;
  const std::size_t act_bytes = static_cast<std::size_t>(d) * n * sizeof(float);
  r.bytes_per_iteration = 2 * act_bytes * static_cast<std::size_t>(L);
  r.model_bytes = act_bytes + static_cast<std::size_t>(L) * (static_cast<std::size_t>(d) * d + d) * sizeof(float);

  // Parameters and input, initialised on the host and uploaded.
  auto* roots = static_cast<model_roots*>(
      GC_MALLOC_UNCOLLECTABLE(sizeof(model_roots) + sizeof(darray*) * static_cast<std::size_t>(2 * L)));
  if (!roots) throw std::bad_alloc();
  std::memset(roots, 0, sizeof(model_roots) + sizeof(darray*) * static_cast<std::size_t>(2 * L));
  struct roots_guard {  // on an exception: unroot the model (its arrays become garbage)
    model_roots*& r;
    ~roots_guard() {
      if (r) GC_FREE(r);
    }
  } rguard{roots};
  {
    std::mt19937_64 rng(o.seed);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::uniform_real_distribution<float> wdist(-scale, scale), xdist(0.f, 1.f), bdist(-0.01f, 0.05f);
    std::vector<float> host(static_cast<std::size_t>(d) * std::max(d, n));
    roots->x = new_array(*dh, d, n, stream);
    for (std::size_t i = 0; i < static_cast<std::size_t>(d) * n; ++i) host[i] = xdist(rng);
    comp->upload(ptr(roots->x), host.data(), act_bytes);
    for (int l = 0; l < L; ++l) {
      darray* W = new_array(*dh, d, d, stream);
      roots->items[l] = W;
      for (std::size_t i = 0; i < static_cast<std::size_t>(d) * d; ++i) host[i] = wdist(rng);
      comp->upload(ptr(W), host.data(), static_cast<std::size_t>(d) * d * sizeof(float));
      darray* b = new_array(*dh, d, 1, stream);
      roots->items[L + l] = b;
      for (int i = 0; i < d; ++i) host[static_cast<std::size_t>(i)] = bdist(rng);
      comp->upload(ptr(b), host.data(), static_cast<std::size_t>(d) * sizeof(float));
    }
    comp->sync();
  }

  alloc.reset_peaks();
  gcp::collection_stats base;  // collections during set-up (normally none) are not the loop's
  dh->policy().fill_stats(base);
  const auto kind = [](const gcp::collection_stats& c, gcp::gc_kind k) { return c.by_kind[static_cast<int>(k)]; };
  const auto rt0 = dh->gc().counters();
  const std::uint64_t allocs0 = alloc.allocation_count();
  std::string first_oom;
  r.samples.reserve(static_cast<std::size_t>(o.iters));

  const double cpu_start = process_cpu_seconds();
  const auto t_start = clock_type::now();
  for (int it = 0; it < o.iters; ++it) {
    const auto t_iter = clock_type::now();
    // In-flight arrays are locals: on the stack, so GC-visible (Note [What is GC-visible here]).
    darray* h = roots->x;
    darray* t = nullptr;
    darray* y = nullptr;
    try {
      for (int l = 0; l < L; ++l) {
        const darray* W = roots->items[l];
        const darray* b = roots->items[L + l];
        t = new_array(*dh, d, n, stream);  // W*x: the broadcast's temporary
        comp->gemm(ptr(W), ptr(h), ptr(t), d, n);
        y = new_array(*dh, d, n, stream);  // relu.(t .+ b)
        comp->bias_relu(ptr(t), ptr(b), ptr(y), d, n);
        if (oracle) {
          dh->unsafe_free(t->buf);
          if (h != roots->x) dh->unsafe_free(h->buf);
        }
        t = nullptr;
        h = y;
        y = nullptr;
        host_garbage(o.host_allocs / L + (l < o.host_allocs % L ? 1 : 0));
      }
      if (it == o.iters - 1 || (o.max_seconds > 0 && since(t_start) >= o.max_seconds)) {
        std::vector<float> col(static_cast<std::size_t>(d));
        comp->download(col.data(), ptr(h), col.size() * sizeof(float));
        r.checksum = 0;
        for (float v : col) r.checksum += v;
      }
      if (oracle && h != roots->x) dh->unsafe_free(h->buf);
      h = nullptr;
    } catch (const gcp::out_of_memory& e) {
      ++r.ooms;
      if (first_oom.empty()) first_oom = e.what();
      if (oracle) {
        for (darray* a : {t, y})
          if (a && boehm::device_heap::is_live(a->buf)) dh->unsafe_free(a->buf);
        if (h && h != roots->x && boehm::device_heap::is_live(h->buf)) dh->unsafe_free(h->buf);
      }
      h = t = y = nullptr;
    }
    comp->sync();    // like CUDA.pool_status(): the iteration's work is done
    dh->iteration(); // the quiet-moment hint at the iteration boundary

    gcp::collection_stats cs;
    dh->policy().fill_stats(cs);
    const iteration_sample s{it + 1,
                             alloc.live_bytes(),
                             alloc.reserved_bytes(),
                             total(cs) - total(base),
                             cs.gc_seconds - base.gc_seconds,
                             kind(cs, gcp::gc_kind::blocking_full) - kind(base, gcp::gc_kind::blocking_full),
                             dh->gc().counters().full_collections - rt0.full_collections};
    r.samples.push_back(s);
    r.max_iteration_seconds = std::max(r.max_iteration_seconds, since(t_iter));
    ++r.iterations;
    if (progress)
      std::fprintf(progress, "[ iter %5d ] pool usage: %s (%s reserved) | collections: %llu (%llu minor, %llu full)%s\n",
                   s.iteration, gcp::format_bytes(s.live).c_str(), gcp::format_bytes(s.reserved).c_str(),
                   static_cast<unsigned long long>(s.collections),
                   static_cast<unsigned long long>(kind(cs, gcp::gc_kind::minor) - kind(base, gcp::gc_kind::minor)),
                   static_cast<unsigned long long>(s.collections - (kind(cs, gcp::gc_kind::minor) -
                                                                    kind(base, gcp::gc_kind::minor))),
                   r.ooms ? (" | OOMs: " + std::to_string(r.ooms)).c_str() : "");
    if (o.max_seconds > 0 && it + 1 < o.iters && since(t_start) >= o.max_seconds) {
      r.stopped_early = true;
      break;
    }
  }
  r.wall_seconds = since(t_start);
  r.cpu_seconds = process_cpu_seconds() - cpu_start;

  // --- results ---
  const auto st = alloc.stats();
  const auto rt1 = dh->gc().counters();
  const auto& g = st.gc;
  r.peak_live_bytes = static_cast<std::size_t>(st.requested.peak);
  r.peak_reserved_bytes = static_cast<std::size_t>(st.reserved.peak);
  r.final_live_bytes = static_cast<std::size_t>(st.requested.current);
  r.final_reserved_bytes = static_cast<std::size_t>(st.reserved.current);
  r.collections_minor = kind(g, gcp::gc_kind::minor) - kind(base, gcp::gc_kind::minor);
  r.collections_incremental_full = kind(g, gcp::gc_kind::incremental_full) - kind(base, gcp::gc_kind::incremental_full);
  r.collections_blocking_full = kind(g, gcp::gc_kind::blocking_full) - kind(base, gcp::gc_kind::blocking_full);
  r.collections_full = r.collections_incremental_full + r.collections_blocking_full;
  // Steady state: the iterations after the first 10% of those run (a
  // collection at iteration boundary k counts for iteration k).
  if (const int steady_start = r.iterations / 10; r.iterations > 0)
    r.collections_full_steady =
        r.collections_blocking_full - (steady_start > 0 ? r.samples[steady_start - 1].blocking_full : 0);
  if (const int steady_start = r.iterations / 10; r.iterations > 0)
    r.runtime_full_collections_steady =
        r.samples.back().runtime_full - (steady_start > 0 ? r.samples[steady_start - 1].runtime_full : 0);
  for (int i = 0; i < 5 && i < gcp::gc_reason_count; ++i) r.collections_by_reason[i] = g.by_reason[i] - base.by_reason[i];
  r.incremental_slices = g.incremental_slices - base.incremental_slices;
  r.ladder_full_collections = st.ladder[static_cast<int>(gcp::ladder_step::full_collection)];
  r.max_pause_seconds = g.longest_pause_seconds;
  r.gc_seconds = g.gc_seconds - base.gc_seconds;
  r.finalized = g.finalized - base.finalized;
  r.allocations = st.allocations - allocs0;
  r.time_per_iter = r.iterations ? r.wall_seconds / r.iterations : 0;
  r.gc_fraction = r.wall_seconds > 0 ? r.gc_seconds / r.wall_seconds : 0;
  r.runtime_collections = rt1.collections - rt0.collections;
  r.runtime_full_collections = rt1.full_collections - rt0.full_collections;
  r.runtime_gc_seconds = rt1.seconds - rt0.seconds;
  r.runtime_heap_bytes = GC_get_heap_size();
  r.pool_status = gcp::to_text(st);
  r.first_oom = first_oom;

  if (!o.trace.empty()) {
    std::FILE* f = std::fopen(o.trace.c_str(), "w");
    if (!f) GCPRESSURE_FAIL("forward_loop: cannot write the trace file '" + o.trace + "'");
    std::fprintf(f, "iteration,live,reserved,collections,gc_seconds\n");
    for (const auto& s : r.samples)
      std::fprintf(f, "%d,%zu,%zu,%llu,%.9f\n", s.iteration, s.live, s.reserved,
                   static_cast<unsigned long long>(s.collections), s.gc_seconds);
    std::fclose(f);
  }

  // --- teardown, outside the measurement ---
  // The oracle frees its parameters too; otherwise the roots go and two full
  // collections finalize what is left, so that the heap shuts down empty.
  if (oracle) {
    dh->unsafe_free(roots->x->buf);
    for (int i = 0; i < 2 * L; ++i) dh->unsafe_free(roots->items[i]->buf);
  }
  GC_FREE(roots);
  roots = nullptr;
  comp->sync();
  scrub_stack();
  for (int i = 0; i < 2 && alloc.live_bytes() > 0; ++i) {
    const std::size_t before = alloc.live_bytes();
    dh->collect(gcp::gc_kind::blocking_full);
    settle_finalizers(alloc);
    if (std::getenv("FWD_DEBUG_TEARDOWN"))
      std::fprintf(stderr, "teardown: live %zu -> %zu\n", before, alloc.live_bytes());
    if (alloc.live_bytes() == before) break;  // what is left is retained, not garbage
  }
  r.live_at_exit_bytes = alloc.live_bytes();
  if (r.live_at_exit_bytes > 0) {
    // Conservatively retained handles (a stale stack word): their blocks go
    // with the allocator; say so once here instead of a misuse line.
    gcp::misuse_handler old = gcp::set_misuse_handler([](const char*) {});
    comp.reset();
    dh.reset();
    gcp::set_misuse_handler(old);
  } else {
    comp.reset();
    dh.reset();
  }
  return r;
}

// --- output ----------------------------------------------------------------------------

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::string to_json(const result& r) {
  std::ostringstream os;
  auto u = [](auto v) { return std::to_string(v); };
  os << "{\"policy\":" << json_string(r.policy) << ",\"backend\":" << json_string(r.backend)
     << ",\"iterations\":" << r.iterations << ",\"iterations_requested\":" << r.iterations_requested
     << ",\"stopped_early\":" << (r.stopped_early ? "true" : "false") << ",\"ooms\":" << u(r.ooms)
     << ",\"peak_live_bytes\":" << u(r.peak_live_bytes) << ",\"peak_reserved_bytes\":" << u(r.peak_reserved_bytes)
     << ",\"final_live_bytes\":" << u(r.final_live_bytes) << ",\"final_reserved_bytes\":" << u(r.final_reserved_bytes)
     << ",\"collections_minor\":" << u(r.collections_minor) << ",\"collections_full\":" << u(r.collections_full)
     << ",\"collections_incremental_full\":" << u(r.collections_incremental_full)
     << ",\"collections_blocking_full\":" << u(r.collections_blocking_full)
     << ",\"collections_full_steady\":" << u(r.collections_full_steady) << ",\"collections_by_reason\":{";
  for (int i = 0; i < 5; ++i)
    os << (i ? "," : "") << json_string(gcp::to_string(static_cast<gcp::gc_reason>(i))) << ":"
       << u(r.collections_by_reason[i]);
  os << "},\"incremental_slices\":" << u(r.incremental_slices)
     << ",\"ladder_full_collections\":" << u(r.ladder_full_collections)
     << ",\"max_pause_seconds\":" << num(r.max_pause_seconds)
     << ",\"max_iteration_seconds\":" << num(r.max_iteration_seconds) << ",\"gc_seconds\":" << num(r.gc_seconds)
     << ",\"gc_fraction\":" << num(r.gc_fraction) << ",\"wall_seconds\":" << num(r.wall_seconds)
     << ",\"time_per_iter\":" << num(r.time_per_iter) << ",\"cpu_seconds\":" << num(r.cpu_seconds)
     << ",\"finalized\":" << u(r.finalized)
     << ",\"allocations\":" << u(r.allocations) << ",\"runtime_collections\":" << u(r.runtime_collections)
     << ",\"runtime_full_collections\":" << u(r.runtime_full_collections)
     << ",\"runtime_full_collections_steady\":" << u(r.runtime_full_collections_steady)
     << ",\"runtime_gc_seconds\":" << num(r.runtime_gc_seconds) << ",\"runtime_heap_bytes\":" << u(r.runtime_heap_bytes) << ",\"host_heap_mib\":" << u(r.host_heap_mib)
     << ",\"host_heap_bytes\":" << u(r.host_heap_bytes) << ",\"host_allocs\":" << r.host_allocs
     << ",\"layers\":" << r.layers << ",\"d\":" << r.d << ",\"batch\":" << r.batch
     << ",\"bytes_per_iteration\":" << u(r.bytes_per_iteration) << ",\"model_bytes\":" << u(r.model_bytes)
     << ",\"hard_limit\":" << u(r.hard_limit) << ",\"soft_limit\":" << u(r.soft_limit)
     << ",\"device_total\":" << u(r.device_total) << ",\"gc_budget\":" << num(r.gc_budget)
     << ",\"live_at_exit_bytes\":" << u(r.live_at_exit_bytes) << ",\"checksum\":" << num(r.checksum)
     << ",\"first_oom\":" << (r.first_oom.empty() ? std::string("null") : json_string(r.first_oom)) << "}";
  return os.str();
}

std::string summary_table(const result& r) {
  std::ostringstream os;
  char buf[256];
  auto row = [&](const char* k, const std::string& v) {
    std::snprintf(buf, sizeof buf, "  %-30s %s\n", k, v.c_str());
    os << buf;
  };
  auto f = [&](const char* fmt, double v) {
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  os << "forward_loop summary\n";
  row("policy / backend", r.policy + " / " + r.backend);
  row("model", std::to_string(r.layers) + " layers, d=" + std::to_string(r.d) + ", batch=" + std::to_string(r.batch) +
                   " (" + gcp::format_bytes(r.model_bytes) + " kept alive, " +
                   gcp::format_bytes(r.bytes_per_iteration) + " dropped per iteration)");
  row("host heap", std::to_string(r.host_heap_mib) + " MiB live (" + gcp::format_bytes(r.host_heap_bytes) + "), " +
                       std::to_string(r.host_allocs) + " small allocations per iteration");
  row("limits", "hard " + gcp::format_bytes(r.hard_limit) + ", soft " + gcp::format_bytes(r.soft_limit) +
                    " (device " + gcp::format_bytes(r.device_total) + ")");
  row("iterations", std::to_string(r.iterations) + (r.stopped_early ? " (stopped early by --max-seconds, of " +
                                                                          std::to_string(r.iterations_requested) + ")"
                                                                    : std::string()));
  row("time per iteration", f("%.3f ms", r.time_per_iter * 1e3) + f(" (wall %.2f s", r.wall_seconds) +
                                f(", CPU %.2f s)", r.cpu_seconds));
  row("peak live / reserved", gcp::format_bytes(r.peak_live_bytes) + " / " + gcp::format_bytes(r.peak_reserved_bytes));
  row("collections minor / full", std::to_string(r.collections_minor) + " / " + std::to_string(r.collections_full) +
                                      " (" + std::to_string(r.collections_incremental_full) + " incremental, " +
                                      std::to_string(r.collections_blocking_full) + " blocking)");
  row("blocking full after 10%", std::to_string(r.collections_full_steady));
  row("GC time", f("%.3f s", r.gc_seconds) + f(" (%.2f%% of wall)", 100 * r.gc_fraction));
  row("longest pause / iteration", f("%.3f ms", r.max_pause_seconds * 1e3) + f(" / %.3f ms", r.max_iteration_seconds * 1e3));
  row("finalized handles", std::to_string(r.finalized));
  row("Boehm's own count", std::to_string(r.runtime_collections) + " collections (" +
                               std::to_string(r.runtime_full_collections) + " whole-heap, " +
                               std::to_string(r.runtime_full_collections_steady) + " after 10%)");
  row("OOMs", std::to_string(r.ooms));
  return os.str();
}

}  // namespace fwd
