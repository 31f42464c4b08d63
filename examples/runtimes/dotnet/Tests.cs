// Tests.cs — the program's entry point (forward | test | fuzz) and the .NET
// binding's tests: finalizers on the finalizer thread, the policy bounding a
// loop the CLR alone cannot, the runtime's own mechanism, and bad input
// (`test`); a seeded fuzz of well- and ill-formed calls (`fuzz`).
using System;
using System.Collections.Generic;

namespace Gcpressure {

public static class Program {
  public static int Main(string[] args) {
    string cmd = args.Length > 0 ? args[0] : "";
    var rest = new string[Math.Max(0, args.Length - 1)];
    System.Array.Copy(args, 1, rest, 0, rest.Length);
    if (cmd == "forward") return ForwardLoop.Run(rest);
    if (cmd == "test") return Tests.Run();
    if (cmd == "options-table") return OptionsTable.Run();
    if (cmd == "fuzz") return Tests.Fuzz(rest.Length > 1 && rest[0] == "--ops" ? int.Parse(rest[1]) : 5000);
    Console.Error.WriteLine("usage: mono gcpressure_dotnet.exe forward ARGS | test | options-table | fuzz [--ops N]");
    return 2;
  }
}

public static class Tests {
  const long MiB = 1 << 20;
  static int failures_;

  static void Check(bool ok, string what) { if (!ok) throw new Exception("check failed: " + what); }

  static void Test(string name, Action f) {
    try {
      f();
      Console.WriteLine("ok   " + name);
    } catch (Exception e) {
      ++failures_;
      Console.WriteLine("FAIL " + name + "\n" + e);
    }
  }

  // f throws an exception of type T whose message contains text.
  static void Throws<T>(Action f, string text) where T : Exception {
    try {
      f();
    } catch (T e) {
      Check(e.Message.Contains(text), "'" + e.Message + "' lacks '" + text + "'");
      return;
    } catch (Exception e) {
      throw new Exception("expected " + typeof(T).Name + ", got " + e.GetType().Name + ": " + e.Message);
    }
    throw new Exception("expected " + typeof(T).Name + " ('" + text + "'), nothing thrown");
  }

  static double Live(Heap h) { return new Json(h.StatsJson()).Num("requested.current"); }

  static void Drop(Heap h, int n, long elems) { for (int i = 0; i < n; ++i) h.Array(elems); }

  public static int Run() {
    Test("finalizers run on the finalizer thread: after GC.Collect, once WaitForPendingFinalizers returns", () => {
      using (var h = new Heap("host", "explicit_free", "256MiB")) {
        Drop(h, 1000, 1024);
        Check(Live(h) == 1000 * 4096, "1000 arrays live");
        GC.Collect(0, GCCollectionMode.Forced, true);
        GC.WaitForPendingFinalizers();
        h.Drain();
        Check(Live(h) == 0, "left " + Live(h) + " bytes after the nursery collection and its finalizers");
        Check(h.Released == 1000, "released " + h.Released);
      }
    });
    Test("the pressure policy bounds device memory (run_finalizers = WaitForPendingFinalizers)", () => {
      using (var h = new Heap("host", "pressure", "8MiB")) {
        Drop(h, 2000, 64 * 1024);  // 500 MiB through an 8 MiB limit
        var s = new Json(h.StatsJson());
        Check(s.Num("ooms") == 0, s.Num("ooms") + " OOMs");
        Check(s.Num("reserved.peak") <= 8 * MiB, "peak " + s.Num("reserved.peak"));
        Check(s.Num("gc.by_kind.minor") + s.Num("gc.by_kind.blocking_full") > 0, "no collection asked for");
        Check(h.FinalizerWaitSeconds > 0, "WaitForPendingFinalizers never ran");
      }
    });
    Test("the CLR alone (policy none) runs out where the policy does not", () => {
      using (var h = new Heap("host", "none", "8MiB"))
        Throws<OutOfMemoryException>(() => Drop(h, 2000, 64 * 1024), "tried to allocate 256.00 KiB");
    });
    Test("runtime_native adds and removes memory pressure per array, asks for no collection", () => {
      using (var h = new Heap("host", "runtime_native", "64MiB")) {
        DeviceArray a = h.Array(MiB / 4), b = h.Array(MiB / 4);
        Check(h.ExternalBytes == 2 * MiB, "external " + h.ExternalBytes);
        a.Free();
        Check(h.ExternalBytes == MiB, "external after free " + h.ExternalBytes);
        var s = new Json(h.StatsJson());
        Check(s.Str("policy") == null || true, "");
        Check(s.Num("gc.by_kind.minor") + s.Num("gc.by_kind.blocking_full") == 0, "the library collected");
        b.Free();
      }
    });
    Test("bad input: sizes, options, another heap", () => {
      using (var h = new Heap("host", "pressure", "16MiB")) {
        Throws<ArgumentException>(() => h.Array(0), "gcpressure_alloc: zero-byte request");
        Throws<ArgumentOutOfRangeException>(() => h.Array(-1), "must be in");
        Throws<OutOfMemoryException>(() => h.Array(1L << 40), "hard limit 16.00 MiB");
        Throws<ArgumentException>(() => new Heap("host", "nope"), "invalid value for policy: 'nope'");
        Throws<ArgumentException>(() => new Heap("host", "pressure", "12 potatoes"), "unknown unit");
        Throws<ArgumentException>(() => new Heap("tape"), "invalid value for backend: 'tape' (expected auto, host");
        DeviceArray w = h.Array(16), x = h.Array(32);
        Throws<ArgumentException>(() => Ops.MatMul(h, w, x, 5, 8), "smaller than");
        Throws<ArgumentOutOfRangeException>(() => Ops.MatMul(h, w, x, 0, 8), "dimensions");
        Throws<ArgumentNullException>(() => Ops.MatMul(h, w, null, 4, 8), "null");
        using (var other = new Heap("host", "pressure", "16MiB"))
          Throws<ArgumentException>(() => Ops.MatMul(other, w, x, 4, 8), "another heap");
        Check(!double.IsNaN(Ops.Sum(Ops.MatMul(h, Ops.FillRandom(w, 1, 1), Ops.Fill(x, 1), 4, 8))), "matmul");
      }
    });
    Test("bad input: freed arrays and use after Dispose", () => {
      var h = new Heap("host", "pressure", "16MiB");
      DeviceArray a = Ops.Fill(h.Array(64), 2), b = h.Array(64);
      Check(Ops.Sum(a) == 128, "sum");
      a.Free();
      Check(!a.IsLive, "freed array is live");
      Throws<ObjectDisposedException>(() => a.Free(), "array used after free");
      Throws<ObjectDisposedException>(() => Ops.Sum(a), "array used after free");
      Throws<ObjectDisposedException>(() => Ops.BiasRelu(h, a, b, 8, 8), "array used after free");
      h.Dispose();
      h.Dispose();  // a second Dispose does nothing
      Throws<ObjectDisposedException>(() => h.Array(4), "the allocator was destroyed");
      Throws<ObjectDisposedException>(() => h.StatsJson(), "the allocator was destroyed");
      Throws<ObjectDisposedException>(() => h.Iteration(), "the allocator was destroyed");
      Throws<ObjectDisposedException>(() => b.Free(), "the allocator was destroyed");
      Check(b.IsLive, "a failed free keeps the array");
    });
    Console.WriteLine(failures_ == 0 ? "all passed" : failures_ + " test(s) failed");
    return failures_ == 0 ? 0 : 1;
  }

  // Seeded random calls; every failure must be one of the binding's exception
  // types with a "gcpressure: " message; live bytes == held bytes after a full
  // collection with its finalizers.
  public static int Fuzz(int ops) {
    var rnd = new Random(1);
    string[] policies = {"pressure", "explicit_free", "runtime_native"};
    var h = new Heap("host", policies[rnd.Next(3)], "16MiB");
    var other = new Heap("host", "pressure", "4MiB");
    DeviceArray foreign = other.Array(16);
    var held = new List<DeviceArray>();
    long[] sizes = {1, 3, 64, 1024, 65536, 262144, 0, -1, 1L << 40, long.MaxValue};
    int[] dims = {1, 2, 4, 8, 0, -3, 1 << 21};
    // Limits as bytes or size strings, good and bad (Note [Limits as text]).
    object[] limits = {null, 0, 4 << 20, 8L << 20, 32 << 20, "8 MB", "16MiB", "1%", "3%", "x", "80%avail", "64 MBx",
                       "0", "150%", -1, 1.5, true};
    Func<DeviceArray> any = () => {
      int i = rnd.Next(held.Count + 2);
      return i < held.Count ? held[i] : i == held.Count ? foreign : null;
    };
    Action[] calls = {
      () => held.Add(h.Array(sizes[rnd.Next(sizes.Length)])),
      () => h.Array(new long[] {16, 256, 4096}[rnd.Next(3)]),
      () => { if (held.Count > 0) held[rnd.Next(held.Count)].Free(); },
      () => Ops.Sum(any()),
      () => Ops.Fill(any(), 1.5f),
      () => held.Add(Ops.MatMul(h, any(), any(), dims[rnd.Next(dims.Length)], dims[rnd.Next(dims.Length)])),
      () => held.Add(Ops.BiasRelu(h, any(), any(), dims[rnd.Next(dims.Length)], dims[rnd.Next(dims.Length)])),
      () => h.Iteration(), () => h.Synchronize(), () => h.Collect(rnd.Next(2) == 1), () => h.Drain(),
      () => GC.Collect(rnd.Next(2)),
      () => h.SetLimits(limits[rnd.Next(limits.Length)], limits[rnd.Next(limits.Length)]),
      () => held.RemoveAll(a => rnd.Next(10) < 3),
      () => new Heap("host", new[] {"nope", "pressure"}[rnd.Next(2)], new[] {"1 potato", "-5", "1GiB"}[rnd.Next(3)]).Dispose(),
    };
    int errors = 0;
    for (int i = 0; i < ops; ++i) {
      try {
        calls[rnd.Next(calls.Length)]();
      } catch (Exception e) {
        ++errors;
        bool ours = e is ArgumentException || e is OutOfMemoryException || e is ObjectDisposedException ||
                    e is InvalidOperationException || e is NotSupportedException;
        if (!ours || !e.Message.StartsWith("gcpressure: ")) {
          Console.WriteLine("fuzz: call " + i + ": unexpected " + e);
          return 1;
        }
      }
    }
    held.RemoveAll(a => !a.IsLive);
    long heldBytes = 0;
    foreach (var a in held) heldBytes += a.Length * 4;
    GC.Collect();
    GC.WaitForPendingFinalizers();
    h.Drain();
    double live = Live(h);
    if (live != heldBytes) {
      Console.WriteLine("fuzz: live " + live + " != held " + heldBytes + " after a full collection");
      return 1;
    }
    foreach (var a in held) a.Free();
    h.Dispose();
    if (foreign.IsLive) foreign.Free();
    other.Dispose();
    Console.WriteLine("fuzz: " + ops + " calls, " + errors + " threw the binding's exceptions; accounting exact");
    return 0;
  }
}

}  // namespace Gcpressure
