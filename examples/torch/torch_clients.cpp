// torch_clients.cpp — the frameworks other than PyTorch that allocate through
// libgcpressure_torch.so (issue 22: gcpressure.cupy, gcpressure.numba), and
// the per-framework byte counts every device keeps.
//
// Note [Frameworks share the devices]
// A process that uses PyTorch and CuPy (or Numba) has one CPython heap and one
// set of devices, so it must have one policy and one pool per device: two
// pools would each cache what the other needs, and two policies would each
// count only their own young bytes. So every framework allocates through this
// library's devices (slot(): one device_allocator per device, all under the
// one policy, Note [Devices join the policy]). A block is accounted once,
// to the framework that allocated it, whoever uses it later: a tensor handed
// from PyTorch to CuPy through DLPack stays PyTorch's block (CuPy allocates
// nothing for it and frees nothing when it lets it go). Each device counts
// the live and peak bytes of every framework apart (client_counters;
// "clients" in the stats JSON), so a mixed process sees both on one device.
//
// PyTorch calls gcp_torch_alloc / gcp_torch_free itself (client 0). The other
// frameworks' adaptors are Python (examples/python/gcpressure/cupy.py,
// numba.py) and hand memory over as an object that owns it: CuPy keeps an
// UnownedMemory's `owner` alive exactly as long as the memory, Numba a
// MemoryPointer's finalizer. gcp_torch_alloc_owned makes that owner a
// capsule whose destructor frees the block on the stream it was allocated on
// (stream-ordered, as PyTorch's frees: the pool reuses it on another stream
// only after the work queued before the free completed) and drops the
// reference that kept that stream alive. So nothing in Python runs when
// CuPy drops memory, and no table of live pointers is needed.
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "torch_state.hpp"

using namespace gcp_torch;

void client_counters::on_alloc(std::size_t n) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t now = live.fetch_add(n, std::memory_order_relaxed) + n;
  std::uint64_t p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void client_counters::on_free(std::size_t n) noexcept {
  frees.fetch_add(1, std::memory_order_relaxed);
  live.fetch_sub(n, std::memory_order_relaxed);
}

namespace {

constexpr const char* k_capsule_name = "gcpressure.block";

// What an owner capsule frees when it dies.
struct owned_block {
  void* ptr;
  std::size_t size;
  int device;
  void* stream;
  int client;
  PyObject* keep;  // a strong reference (the framework's stream object), or null
};

// The capsule's destructor: runs where the owner's last reference goes, with
// the GIL (inside a collection, at interpreter shutdown, on any thread).
// free_for never takes the collection lock and never calls Python.
// The block is the capsule's context as well as its pointer (make_owner):
// PyCapsule_GetContext checks the capsule without comparing its name, a
// strcmp per free saved (this destructor is only ever given our capsules).
void release_owned(PyObject* capsule) {
  auto* b = static_cast<owned_block*>(PyCapsule_GetContext(capsule));
  if (!b) {
    PyErr_Clear();
    return;
  }
  try {
    free_for(b->ptr, b->size, b->device, b->stream, b->client);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gcpressure: free of %p (%zu bytes, device %d) failed: %s\n", b->ptr, b->size, b->device,
                 e.what());
  }
  PyObject* keep = b->keep;
  delete b;
  Py_XDECREF(keep);
}

PyObject* none() {
  Py_INCREF(Py_None);
  return Py_None;
}

// The owner of block `p`: a capsule that frees it (on `stream`) and drops
// `keep` (None or null: nothing kept) when it dies. On failure (no host
// memory) the block is freed here and null returned, the Python error cleared.
PyObject* make_owner(void* p, std::size_t size, int device, void* stream, int client, PyObject* keep) {
  auto* b = new (std::nothrow) owned_block{p, size, device, stream, client, nullptr};
  PyObject* cap = b ? PyCapsule_New(b, k_capsule_name, release_owned) : nullptr;
  if (!cap) {
    PyErr_Clear();
    delete b;
    free_for(p, size, device, stream, client);
    return nullptr;
  }
  PyCapsule_SetContext(cap, b);  // what release_owned reads (cannot fail: cap is a valid capsule)
  if (keep && keep != Py_None) {
    Py_INCREF(keep);
    b->keep = keep;
  }
  return cap;
}

}  // namespace

// The index of framework `name` in k_client_names (Note [Frameworks share the
// devices]), or -1. Any thread.
GCP_EXPORT int gcp_torch_client_id(const char* name) {
  for (int i = 0; i < k_clients; ++i)
    if (name && std::strcmp(name, k_client_names[i]) == 0) return i;
  return -1;
}

// An allocation for framework `client` on `device`, ordered on `stream`, as
// a tuple (pointer as an int, owner capsule): the block is freed on `stream`
// when the owner dies, and `keep` (may be None) stays referenced until then.
// Returns None when the allocation failed (out of memory after the reclaim
// ladder, or a bad argument): gcp_torch_last_error() says why, so the caller
// raises its framework's own exception. Zero bytes: None too (callers handle
// empty arrays themselves). Call with the GIL held (ctypes.PyDLL); it may
// collect (CPython's collector runs on this thread, Note [GIL and the
// collection lock]). Thread-safe.
GCP_EXPORT PyObject* gcp_torch_alloc_owned(std::size_t size, int device, void* stream, int client,
                                           PyObject* keep) {
  if (client < 0 || client >= k_clients) {
    fail("gcp_torch_alloc_owned: unknown framework index " + std::to_string(client));
    return none();
  }
  if (size == 0) {
    fail("gcp_torch_alloc_owned: zero-byte request");
    return none();
  }
  void* p = alloc_for(size, device, stream, client, true);
  if (!p) return none();
  PyObject* cap = make_owner(p, size, device, stream, client, keep);
  PyObject* addr = cap ? PyLong_FromVoidPtr(p) : nullptr;
  PyObject* out = addr ? PyTuple_Pack(2, addr, cap) : nullptr;
  Py_XDECREF(addr);
  Py_XDECREF(cap);  // a failure here still frees the block, through the capsule
  if (!out) {
    PyErr_Clear();
    fail("gcp_torch_alloc_owned: no host memory for the owner object");
    return none();
  }
  return out;
}

// --- alloc_owned as a builtin ----------------------------------------------------------

// Note [alloc_owned without ctypes]
// gcpressure.cupy's malloc_py and gcpressure.numba's allocations call
// alloc_owned(size, device, stream, client, keep) once per allocation.
// Through ctypes (argtypes c_size_t, c_int, c_void_p, c_int, py_object) that
// call converted every argument through its type's from_param and built a
// ctypes call frame: about 8 000 instructions per call (callgrind, CPU
// machine, 2026-12-06), four times the library's whole alloc + free. This builtin (METH_FASTCALL, no argument tuple) converts
// the same arguments as the C API does and calls gcp_torch_alloc_owned: the
// same results (the tuple, or None with last_error set), `stream` None or an
// int as ctypes' c_void_p took it. Arguments of the wrong type raise
// TypeError / OverflowError (ctypes raised ctypes.ArgumentError).

namespace {

PyObject* alloc_owned_builtin(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_Format(PyExc_TypeError, "alloc_owned(size, device, stream, client, keep) takes 5 arguments (%zd given)",
                 nargs);
    return nullptr;
  }
  const std::size_t size = PyLong_AsSize_t(args[0]);
  if (size == static_cast<std::size_t>(-1) && PyErr_Occurred()) return nullptr;
  const long device = PyLong_AsLong(args[1]);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  void* stream = nullptr;
  if (args[2] != Py_None) {
    stream = PyLong_AsVoidPtr(args[2]);
    if (!stream && PyErr_Occurred()) return nullptr;
  }
  const long client = PyLong_AsLong(args[3]);
  if (client == -1 && PyErr_Occurred()) return nullptr;
  if (device < INT_MIN || device > INT_MAX || client < INT_MIN || client > INT_MAX) {
    PyErr_SetString(PyExc_OverflowError, "alloc_owned: device or client out of range");
    return nullptr;
  }
  return gcp_torch_alloc_owned(size, static_cast<int>(device), stream, static_cast<int>(client), args[4]);
}

PyMethodDef k_alloc_owned_def = {
    "alloc_owned", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(alloc_owned_builtin)), METH_FASTCALL,
    "alloc_owned(size, device, stream, client, keep) -> (ptr, owner) or None (Note [alloc_owned without ctypes] in "
    "torch_clients.cpp)"};

}  // namespace

// The builtin of Note [alloc_owned without ctypes]; None (last_error says
// why) if it could not be made. With the GIL (ctypes.PyDLL).
GCP_EXPORT PyObject* gcp_torch_alloc_owned_builtin() {
  PyObject* fn = PyCFunction_New(&k_alloc_owned_def, nullptr);
  if (!fn) {
    PyErr_Clear();
    fail("gcp_torch_alloc_owned_builtin: could not make the function");
    return none();
  }
  return fn;
}

// --- CuPy's allocator in C ------------------------------------------------------------

// Note [A C allocator for CuPy]
// cupy.cuda.set_allocator takes any callable(nbytes) -> MemoryPointer. A
// Python function there costs a frame, a ctypes call (argument conversion
// per call) and the lookups of CuPy's device and stream; the same steps as
// one C function (a builtin bound to the CuPy callables it needs) cost a few
// C calls into CuPy. It does what gcpressure/cupy.py's reference version
// (malloc_py) does, in the same order: the current device
// (cupy.cuda.device.get_device_id), zero bytes -> an empty UnownedMemory,
// else CuPy's current stream (get_current_stream(device).ptr), the allocation on
// it, the owner capsule keeping the stream object, UnownedMemory(ptr, size,
// owner, device), MemoryPointer(mem, 0); on failure the exception that the
// Python `oom(nbytes, device)` returns (CuPy's OutOfMemoryError with the
// library's report) is raised.

namespace {

constexpr const char* k_binding_name = "gcpressure.cupy_binding";

struct cupy_binding {
  PyObject* get_device_id;
  PyObject* get_stream;
  PyObject* unowned;
  PyObject* pointer;
  PyObject* oom;
  PyObject* ptr_name;  // "ptr", interned
  PyObject* zero;      // 0
  int client;
};

void free_binding(cupy_binding* b) {
  for (PyObject* o : {b->get_device_id, b->get_stream, b->unowned, b->pointer, b->oom, b->ptr_name, b->zero})
    Py_XDECREF(o);
  delete b;
}

void drop_binding(PyObject* capsule) {
  auto* b = static_cast<cupy_binding*>(PyCapsule_GetPointer(capsule, k_binding_name));
  if (b) free_binding(b);
  else PyErr_Clear();
}

// UnownedMemory(addr, size, owner, device) -> MemoryPointer(mem, 0). Takes
// nothing; returns a new reference or null with the Python error set.
// `size` is the caller's nbytes object (an int): no new one per call.
PyObject* cupy_pointer(const cupy_binding& b, PyObject* addr, PyObject* size, PyObject* owner, PyObject* device) {
  PyObject* args = PyTuple_Pack(4, addr, size, owner, device);
  PyObject* mem = args ? PyObject_Call(b.unowned, args, nullptr) : nullptr;
  Py_XDECREF(args);
  if (!mem) return nullptr;
  PyObject* margs = PyTuple_Pack(2, mem, b.zero);
  Py_DECREF(mem);
  PyObject* mp = margs ? PyObject_Call(b.pointer, margs, nullptr) : nullptr;
  Py_XDECREF(margs);
  return mp;
}

// Raises what b.oom(size, device) returns.
PyObject* raise_oom(const cupy_binding& b, std::size_t size, long device) {
  PyObject* e = PyObject_CallFunction(b.oom, "nl", static_cast<Py_ssize_t>(size), device);
  if (e) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e)), e);
    Py_DECREF(e);
  }
  return nullptr;
}

// cupy_malloc's nonzero case. The device is passed to get_current_stream:
// without it CuPy asks the runtime for the current device a second time
// (stream.pyx, _ThreadLocal.get_current_stream).
PyObject* allocate(cupy_binding* b, std::size_t size, PyObject* arg, long device, PyObject* dev_obj) {
  PyObject* stream = PyObject_CallFunctionObjArgs(b->get_stream, dev_obj, nullptr);
  PyObject* sp = stream ? PyObject_GetAttr(stream, b->ptr_name) : nullptr;
  void* s = sp ? PyLong_AsVoidPtr(sp) : nullptr;
  Py_XDECREF(sp);
  if (!sp || PyErr_Occurred()) {
    Py_XDECREF(stream);
    return nullptr;
  }
  void* p = alloc_for(size, static_cast<int>(device), s, b->client, true);
  if (!p) {
    Py_DECREF(stream);
    return raise_oom(*b, size, device);
  }
  PyObject* owner = make_owner(p, size, static_cast<int>(device), s, b->client, stream);
  Py_DECREF(stream);
  PyObject* addr = owner ? PyLong_FromVoidPtr(p) : nullptr;
  PyObject* mp = addr ? cupy_pointer(*b, addr, arg, owner, dev_obj) : nullptr;
  Py_XDECREF(addr);
  Py_XDECREF(owner);  // if anything failed, this frees the block
  if (!owner) PyErr_NoMemory();
  return mp;
}

PyObject* cupy_malloc(PyObject* self, PyObject* arg) {
  // The binding is the capsule's context too: no strcmp of its name per call.
  auto* b = static_cast<cupy_binding*>(PyCapsule_GetContext(self));
  if (!b) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "gcpressure.cupy: malloc has no binding");
    return nullptr;
  }
  const std::size_t size = PyLong_AsSize_t(arg);
  if (size == static_cast<std::size_t>(-1) && PyErr_Occurred()) return nullptr;
  PyObject* dev_obj = PyObject_CallNoArgs(b->get_device_id);
  if (!dev_obj) return nullptr;
  const long device = PyLong_AsLong(dev_obj);
  if (device == -1 && PyErr_Occurred()) {
    Py_DECREF(dev_obj);
    return nullptr;
  }
  PyObject* mp = size == 0 ? cupy_pointer(*b, b->zero, arg, Py_None, dev_obj)
                           : allocate(b, size, arg, device, dev_obj);
  Py_DECREF(dev_obj);
  return mp;
}

PyMethodDef k_cupy_malloc_def = {"malloc", cupy_malloc, METH_O,
                                 "malloc(nbytes) -> cupy.cuda.MemoryPointer (gcpressure.cupy; Note [A C allocator for "
                                 "CuPy] in torch_clients.cpp)"};

}  // namespace

// The builtin `malloc(nbytes)` of Note [A C allocator for CuPy], bound to
// CuPy's callables and framework index `client`; None (last_error says why)
// on bad arguments. With the GIL (ctypes.PyDLL). The builtin itself is
// thread-safe (any thread with the GIL; it may collect on that thread).
GCP_EXPORT PyObject* gcp_torch_cupy_allocator(PyObject* get_device_id, PyObject* get_stream, PyObject* unowned,
                                              PyObject* pointer, PyObject* oom, int client) {
  if (client < 0 || client >= k_clients) {
    fail("gcp_torch_cupy_allocator: unknown framework index " + std::to_string(client));
    return none();
  }
  for (PyObject* o : {get_device_id, get_stream, unowned, pointer, oom})
    if (!o || !PyCallable_Check(o)) {
      fail("gcp_torch_cupy_allocator: an argument is not callable");
      return none();
    }
  for (PyObject* o : {get_device_id, get_stream, unowned, pointer, oom}) Py_INCREF(o);
  auto* b = new (std::nothrow) cupy_binding{get_device_id, get_stream, unowned, pointer, oom,
                                            PyUnicode_InternFromString("ptr"), PyLong_FromLong(0), client};
  PyObject* self = b && b->ptr_name && b->zero ? PyCapsule_New(b, k_binding_name, drop_binding) : nullptr;
  if (self) PyCapsule_SetContext(self, b);  // what cupy_malloc reads
  if (!self) {
    PyErr_Clear();
    if (b) {
      free_binding(b);
    } else {
      for (PyObject* o : {get_device_id, get_stream, unowned, pointer, oom}) Py_DECREF(o);
    }
    fail("gcp_torch_cupy_allocator: out of host memory");
    return none();
  }
  PyObject* fn = PyCFunction_New(&k_cupy_malloc_def, self);
  Py_DECREF(self);
  if (!fn) {
    PyErr_Clear();
    fail("gcp_torch_cupy_allocator: could not make the function");
    return none();
  }
  return fn;
}
