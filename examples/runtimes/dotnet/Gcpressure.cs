// Gcpressure.cs — the .NET (Mono) binding of gcpressure's C API through
// P/Invoke: Heap (one allocator, the CLR's GC as its collector) and
// DeviceArray (a SafeHandle whose release returns the block). README.md has
// the design and its measurements.
//
// Note [The CLR's GC as the collector]
// minor = GC.Collect(0) (SGen: a nursery collection), full = GC.Collect()
// (a blocking whole-heap collection). Unreachable DeviceArrays are not
// released by the collection itself: their finalizers (SafeHandle's critical
// finalizer, ReleaseHandle) run later on the runtime's finalizer thread, so
// the collector's run_finalizers callback is GC.WaitForPendingFinalizers():
// the policy calls it after a collection and before it retries, and it
// returns how many arrays were released meanwhile. Its cost (a thread switch
// and the finalizers' own time) is part of the policy's collection time in
// the stats. On the finalizer thread ReleaseHandle only calls
// gcpressure_release_from_finalizer (lock-free, safe on any thread).
// The runtime's own collections (GC.CollectionCount) are reported through
// own_collections, less the ones the callbacks ran; their time is unknown.
using System;
using System.Collections.Generic;
using System.Runtime.ConstrainedExecution;
using System.Runtime.InteropServices;
using System.Threading;

namespace Gcpressure {

internal static class Native {
  const string Lib = "gcpressure";

  [StructLayout(LayoutKind.Sequential)]
  internal struct Options {
    public UIntPtr struct_size;
    public int backend;
    public int device;
    public UIntPtr host_capacity;
    public IntPtr soft_limit, hard_limit, policy;
    public double gc_budget;
    public int every_n;
    public int read_env;
    public int collector;
    public IntPtr devices;
    // API version 5 (gcpressure_options_set):
    public IntPtr host_shared;
    public int pool;
    public UIntPtr async_release_threshold;
    public int verbose;
  }

  [UnmanagedFunctionPointer(CallingConvention.Cdecl)] internal delegate void VoidFn(IntPtr ctx);
  [UnmanagedFunctionPointer(CallingConvention.Cdecl)] internal delegate UIntPtr SizeFn(IntPtr ctx);
  [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
  internal delegate void OwnFn(IntPtr ctx, out ulong collections, out ulong full, out double seconds, out int exact);

  [StructLayout(LayoutKind.Sequential)]
  internal struct Callbacks {
    public UIntPtr struct_size;
    public IntPtr context, minor, full, run_finalizers, start_full, step_full, heap_bytes;
    public int minor_is_full;
    public IntPtr own_collections;
  }

  [DllImport(Lib)] internal static extern void gcpressure_options_init(ref Options o);
  [DllImport(Lib)] internal static extern void gcpressure_collector_callbacks_init(ref Callbacks c);
  [DllImport(Lib)] internal static extern IntPtr gcpressure_last_error();
  [DllImport(Lib)] internal static extern IntPtr gcpressure_status_string(int s);
  [DllImport(Lib)] internal static extern IntPtr gcpressure_policy_names();
  [DllImport(Lib)] internal static extern IntPtr gcpressure_option_names();
  [DllImport(Lib)] internal static extern int gcpressure_create(ref Options o, out IntPtr a);
  [DllImport(Lib)] internal static extern int gcpressure_options_set(ref Options o, string name, string value);
  [DllImport(Lib)] internal static extern int gcpressure_destroy(IntPtr a);
  [DllImport(Lib)] internal static extern int gcpressure_set_collector(IntPtr a, ref Callbacks c);
  [DllImport(Lib)] internal static extern int gcpressure_alloc(IntPtr a, UIntPtr bytes, IntPtr stream, out IntPtr p);
  [DllImport(Lib)] internal static extern int gcpressure_free(IntPtr a, IntPtr p, UIntPtr bytes, IntPtr stream);
  [DllImport(Lib)] internal static extern int gcpressure_release_from_finalizer(IntPtr a, IntPtr p, UIntPtr bytes, IntPtr s);
  [DllImport(Lib)] internal static extern int gcpressure_iteration(IntPtr a);
  [DllImport(Lib)] internal static extern int gcpressure_synchronize(IntPtr a, IntPtr stream);
  [DllImport(Lib)] internal static extern int gcpressure_collect(IntPtr a, int full);
  [DllImport(Lib)] internal static extern int gcpressure_drain(IntPtr a);
  [DllImport(Lib)] internal static extern int gcpressure_stats_json(IntPtr a, byte[] buf, UIntPtr cap, out UIntPtr need);
  [DllImport(Lib)] internal static extern int gcpressure_in_collection();
  [DllImport(Lib)] internal static extern int gcpressure_set_limits(IntPtr a, UIntPtr soft, UIntPtr hard);
  [DllImport(Lib)] internal static extern int gcpressure_parse_size(string text, UIntPtr device_total, out UIntPtr bytes);

  internal static string Str(IntPtr p) { return p == IntPtr.Zero ? "" : Marshal.PtrToStringAnsi(p); }
  // A NULL-terminated array of C strings (gcpressure_policy_names, gcpressure_option_names).
  internal static string[] Strings(IntPtr p) {
    var list = new List<string>();
    for (int i = 0;; ++i) {
      IntPtr s = Marshal.ReadIntPtr(p, i * IntPtr.Size);
      if (s == IntPtr.Zero) break;
      list.Add(Str(s));
    }
    return list.ToArray();
  }
}

// Note [Errors]: a failed C API call throws .NET's own exception for its
// status, with the message "gcpressure: WHAT: STATUS: " and the C API's own
// (gcpressure_last_error); Data["gcpressure.status"] is the status name.
//   INVALID -> ArgumentException     OOM -> OutOfMemoryException
//   MISUSE -> InvalidOperationException   SHUTDOWN -> ObjectDisposedException
//   UNSUPPORTED -> NotSupportedException  others -> ExternalException
public static class Errors {
  static readonly string[] Names = {"GCPRESSURE_OK", "GCPRESSURE_ERR_INVALID", "GCPRESSURE_ERR_OOM",
    "GCPRESSURE_ERR_MISUSE", "GCPRESSURE_ERR_SHUTDOWN", "GCPRESSURE_ERR_CUDA", "GCPRESSURE_ERR_UNSUPPORTED",
    "GCPRESSURE_ERR_BUSY", "GCPRESSURE_ERR_TRUNCATED", "GCPRESSURE_ERR_INTERNAL"};

  public static Exception Make(int status, string message) {
    Exception e;
    switch (status) {
      case 1: e = new ArgumentException(message); break;
      case 2: e = new OutOfMemoryException(message); break;
      case 3: e = new InvalidOperationException(message); break;
      case 4: e = new ObjectDisposedException("gcpressure.Heap", message); break;
      case 6: e = new NotSupportedException(message); break;
      default: e = new ExternalException(message, status); break;
    }
    e.Data["gcpressure.status"] = status >= 0 && status < Names.Length ? Names[status] : "GCPRESSURE_ERR_INTERNAL";
    return e;
  }

  // Throws the C API's failure (read right after the failing call, same thread).
  internal static void Check(int status, string what) {
    if (status == 0) return;
    string lib = Native.Str(Native.gcpressure_last_error());
    if (lib.StartsWith("gcpressure: ")) lib = lib.Substring(12);  // said once, in front
    string msg = "gcpressure: " + what + ": " + Native.Str(Native.gcpressure_status_string(status)) + ": " + lib;
    throw Make(status, msg);
  }
}

public sealed class Heap : IDisposable {
  internal IntPtr a_;
  internal readonly bool native_;  // runtime_native: GC.AddMemoryPressure per array
  bool closed_;
  long own_minor_, own_full_;      // collections the callbacks ran (not the runtime's own)
  long released_;                  // arrays released by finalizers (ReleaseHandle)
  long external_;                  // bytes now added with AddMemoryPressure
  public double FinalizerWaitSeconds;  // time in WaitForPendingFinalizers (the run_finalizers callback)
  // The delegates stay referenced while the allocator may call them.
  readonly Native.VoidFn minor_, full_;
  readonly Native.SizeFn run_finalizers_, heap_bytes_;
  readonly Native.OwnFn own_;

  public static string[] PolicyNames() { return Native.Strings(Native.gcpressure_policy_names()); }

  // backend: a name GCPRESSURE_BACKEND takes (null: auto); policy: a name of PolicyNames() or
  // "none" (no collector: the CLR alone); limits as the C API reads them ("64MiB", "80%").
  // options: any other option of the library's table by its name (OptionNames(): "gc_budget",
  // "every_n", "pool", "verbose", ...; Note [Every option of the table]).
  public Heap(string backend = null, string policy = null, string hardLimit = null, string softLimit = null,
              IDictionary<string, object> options = null) {
    var o = new Native.Options();
    Native.gcpressure_options_init(ref o);
    if (o.struct_size.ToUInt64() != (ulong)Marshal.SizeOf(typeof(Native.Options)))
      throw new NotSupportedException("gcpressure: the C API's gcpressure_options is " + o.struct_size +
                                      " bytes, this binding's " + Marshal.SizeOf(typeof(Native.Options)));
    bool collector = policy != "none";
    native_ = policy == "runtime_native";
    var given = new List<KeyValuePair<string, object>>();
    if (backend != null) given.Add(new KeyValuePair<string, object>("backend", backend));
    if (collector && policy != null) given.Add(new KeyValuePair<string, object>("policy", policy));
    if (hardLimit != null) given.Add(new KeyValuePair<string, object>("hard_limit", hardLimit));
    if (softLimit != null) given.Add(new KeyValuePair<string, object>("soft_limit", softLimit));
    if (options != null) given.AddRange(options);
    foreach (var kv in given)
      Errors.Check(Native.gcpressure_options_set(ref o, kv.Key, OptionText(kv.Key, kv.Value)), "Heap");
    Errors.Check(Native.gcpressure_create(ref o, out a_), "Heap");
    if (!StatsJson().Contains("\"backend\":\"host\"")) {
      Native.gcpressure_destroy(a_);
      throw Errors.Make(6, "gcpressure: Heap: unsupported: this binding computes on the CPU: backend host only");
    }
    minor_ = ctx => { Interlocked.Increment(ref own_minor_); GC.Collect(0, GCCollectionMode.Forced, true); };
    full_ = ctx => { Interlocked.Increment(ref own_full_); GC.Collect(); };
    run_finalizers_ = ctx => {
      long before = Interlocked.Read(ref released_);
      var t = System.Diagnostics.Stopwatch.StartNew();
      GC.WaitForPendingFinalizers();
      FinalizerWaitSeconds += t.Elapsed.TotalSeconds;
      return new UIntPtr((ulong)(Interlocked.Read(ref released_) - before));
    };
    heap_bytes_ = ctx => new UIntPtr((ulong)GC.GetTotalMemory(false));
    own_ = (IntPtr ctx, out ulong n, out ulong full, out double s, out int exact) => {
      // SGen: generation 0 is the nursery, 1 the major heap (GC.MaxGeneration == 1).
      long f = GC.CollectionCount(GC.MaxGeneration) - Interlocked.Read(ref own_full_);
      long all = GC.CollectionCount(0) - Interlocked.Read(ref own_minor_) - Interlocked.Read(ref own_full_);
      n = (ulong)Math.Max(0, all);
      full = (ulong)Math.Max(0, f);
      s = 0;
      exact = 0;
    };
    if (!collector) return;
    var c = new Native.Callbacks();
    Native.gcpressure_collector_callbacks_init(ref c);
    c.minor = Marshal.GetFunctionPointerForDelegate(minor_);
    c.full = Marshal.GetFunctionPointerForDelegate(full_);
    c.run_finalizers = Marshal.GetFunctionPointerForDelegate(run_finalizers_);
    c.heap_bytes = Marshal.GetFunctionPointerForDelegate(heap_bytes_);
    c.own_collections = Marshal.GetFunctionPointerForDelegate(own_);
    Errors.Check(Native.gcpressure_set_collector(a_, ref c), "Heap");
  }

  // Note [Every option of the table]
  // Every option is set through gcpressure_options_set, so its parser and its
  // message are the ones its GCPRESSURE_* variable gets (the C API copies the
  // text). A value is the text that variable would hold: a string as is, an
  // integer in decimal, a double in round-trip form, a bool as 1 or 0.
  static string OptionText(string name, object v) {
    if (v is string) return (string)v;
    if (v is bool) return (bool)v ? "1" : "0";
    if (v is double || v is float)
      return Convert.ToDouble(v).ToString("R", System.Globalization.CultureInfo.InvariantCulture);
    if (v is int || v is long || v is uint || v is ulong || v is short || v is ushort || v is byte || v is sbyte)
      return Convert.ToString(v, System.Globalization.CultureInfo.InvariantCulture);
    throw Errors.Make(1, "gcpressure: Heap: option '" + name + "' must be a string, a number or a bool, not " +
                         (v == null ? "null" : v.GetType().Name));
  }

  // The names of the library's options table (gcpressure_option_names).
  public static string[] OptionNames() { return Native.Strings(Native.gcpressure_option_names()); }

  public bool RuntimeNative { get { return native_; } }
  public long ExternalBytes { get { return Interlocked.Read(ref external_); } }
  public long Released { get { return Interlocked.Read(ref released_); } }
  internal void CountRelease() { Interlocked.Increment(ref released_); }
  internal void AddPressure(long bytes) {
    Interlocked.Add(ref external_, bytes);
    if (bytes > 0) GC.AddMemoryPressure(bytes); else GC.RemoveMemoryPressure(-bytes);
  }

  // A new array of n float32 elements.
  public DeviceArray Array(long n) {
    if (n < 0 || n > long.MaxValue / 4)
      throw new ArgumentOutOfRangeException("n", n, "gcpressure: Heap.Array(n): n must be in 0 .. 2^61");
    return new DeviceArray(this, n);
  }

  public void Iteration() { Errors.Check(Native.gcpressure_iteration(a_), "iteration"); }
  public void Synchronize() { Errors.Check(Native.gcpressure_synchronize(a_, IntPtr.Zero), "synchronize"); }
  public void Collect(bool full) { Errors.Check(Native.gcpressure_collect(a_, full ? 1 : 0), "collect"); }
  public void Drain() { Errors.Check(Native.gcpressure_drain(a_), "drain"); }

  // Note [Limits as text]
  // SetLimits(soft, hard) takes each limit as the constructor takes it: bytes
  // (an integer; 0 or null: unchanged) or a size string ("64 MB", "64MiB",
  // "50%" of the device). A string is first given to gcpressure_options_set
  // under the limit's own name, so a bad one gets the constructor's message
  // (naming soft_limit or hard_limit: the bad-value table's text), then read
  // into bytes by gcpressure_parse_size against the device's total, as the
  // Lua and Guile bindings read theirs ("N%avail" follows the memory at run
  // time, which a limit set now cannot: parse_size refuses it).
  public void SetLimits(object soft = null, object hard = null) {
    if (closed_) {  // the C API's tombstone answers, before a percentage needs the device
      Errors.Check(Native.gcpressure_set_limits(a_, UIntPtr.Zero, UIntPtr.Zero), "SetLimits");
      throw Errors.Make(4, "gcpressure: SetLimits: the heap was closed");
    }
    ulong s = LimitBytes("soft_limit", soft), h = LimitBytes("hard_limit", hard);
    Errors.Check(Native.gcpressure_set_limits(a_, new UIntPtr(s), new UIntPtr(h)), "SetLimits");
  }

  ulong LimitBytes(string name, object v) {
    if (v == null) return 0;
    if (v is int || v is long || v is short || v is sbyte) {
      long n = Convert.ToInt64(v);
      if (n < 0) throw Errors.Make(1, "gcpressure: SetLimits: " + name + " must be a non-negative number of bytes, not " + n);
      return (ulong)n;
    }
    if (v is uint || v is ulong || v is ushort || v is byte) return Convert.ToUInt64(v);
    string text = v as string;
    if (text == null)
      throw Errors.Make(1, "gcpressure: SetLimits: " + name + " must be an integer or a string, not " + v.GetType().Name);
    var scratch = new Native.Options();
    Native.gcpressure_options_init(ref scratch);
    Errors.Check(Native.gcpressure_options_set(ref scratch, name, text), "SetLimits");
    UIntPtr bytes;
    Errors.Check(Native.gcpressure_parse_size(text, new UIntPtr(DeviceTotal()), out bytes), "SetLimits");
    return bytes.ToUInt64();
  }

  // The device's total memory from the stats (for a percentage).
  ulong DeviceTotal() {
    string js = StatsJson(), key = "\"device_total\":";
    int at = js.IndexOf(key, StringComparison.Ordinal);
    if (at < 0) return 0;
    int end = at += key.Length;
    while (end < js.Length && char.IsDigit(js[end])) ++end;
    ulong total;
    return ulong.TryParse(js.Substring(at, end - at), out total) ? total : 0;
  }

  public string StatsJson() {
    var buf = new byte[1 << 14];
    UIntPtr need;
    int st = Native.gcpressure_stats_json(a_, buf, new UIntPtr((ulong)buf.Length), out need);
    if (st == 8) {
      buf = new byte[need.ToUInt64()];
      st = Native.gcpressure_stats_json(a_, buf, new UIntPtr((ulong)buf.Length), out need);
    }
    Errors.Check(st, "stats");
    return System.Text.Encoding.UTF8.GetString(buf, 0, (int)need.ToUInt64() - 1);
  }

  // Destroys the allocator after a full collection and its finalizers (the C API's
  // destroy with callbacks only drains). Later calls: ObjectDisposedException.
  public void Dispose() {
    if (closed_) return;
    if (Native.gcpressure_in_collection() != 0) Errors.Check(7, "close");
    closed_ = true;
    GC.Collect();
    GC.WaitForPendingFinalizers();
    int st = Native.gcpressure_destroy(a_);  // a_ stays: the C API's tombstone answers SHUTDOWN
    Errors.Check(st, "close");
  }
}

// A device array: n float32 elements. Dropped, its finalizer returns the block;
// Free() returns it now. Thread-safe as SafeHandle is; compute is on the caller's thread.
public sealed class DeviceArray : SafeHandle {
  readonly Heap heap_;
  readonly IntPtr alloc_;
  public readonly long Length;
  readonly long bytes_;

  internal DeviceArray(Heap h, long n) : base(IntPtr.Zero, true) {
    heap_ = h;
    alloc_ = h.a_;
    Length = n;
    bytes_ = n * 4;
    IntPtr p;
    Errors.Check(Native.gcpressure_alloc(h.a_, new UIntPtr((ulong)bytes_), IntPtr.Zero, out p), "alloc");
    SetHandle(p);
    if (h.native_) h.AddPressure(bytes_);  // Note [The runtime's own mechanism]
  }

  public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
  public Heap Owner { get { return heap_; } }
  public bool IsLive { get { return !IsClosed; } }

  // The finalizer thread's (or Dispose's) release: queue the block, lock-free.
  [ReliabilityContract(Consistency.WillNotCorruptState, Cer.Success)]
  protected override bool ReleaseHandle() {
    Native.gcpressure_release_from_finalizer(alloc_, handle, new UIntPtr((ulong)bytes_), IntPtr.Zero);
    if (heap_.native_) heap_.AddPressure(-bytes_);
    heap_.CountRelease();
    return true;
  }

  // Frees now (the oracle). A second Free, or use after it: ObjectDisposedException.
  public void Free() {
    IntPtr p = Ptr("free");
    Errors.Check(Native.gcpressure_free(alloc_, p, new UIntPtr((ulong)bytes_), IntPtr.Zero), "free");
    SetHandleAsInvalid();  // closed, and ReleaseHandle will not run
    if (heap_.native_) heap_.AddPressure(-bytes_);
  }

  // The pointer, for compute; throws when freed.
  public IntPtr Ptr(string what) {
    if (IsClosed) throw new ObjectDisposedException("DeviceArray", "gcpressure: " + what + ": misuse: array used after free");
    return handle;
  }
}

}  // namespace Gcpressure
