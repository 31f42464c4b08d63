// ForwardLoop.cs — the forward loop of the C++ forward_loop (bench/forward)
// in C# on Mono, over Gcpressure.cs; the same options, workloads, oracle and
// JSON summary as examples/runtimes/node/forward_loop.js (see its header).
//
//   mono gcpressure_dotnet.exe forward [--backend host] [--policy NAME|none]
//     [--workload steady|promote|burst|varied] [--iters N] [--layers N] [--d N] [--batch N]
//     [--host-heap-mib N] [--hard-limit SIZE] [--soft-limit SIZE] [--promote-share X]
//     [--burst-every N] [--burst-fraction X] [--seed N] [--no-sync] [--json] [--quiet]
//     [--check] [--expect-oom]
//
// explicit_free is the oracle (each array freed the moment it dies);
// runtime_native is .NET's own mechanism only (GC.AddMemoryPressure at each
// allocation, RemoveMemoryPressure at each release; the library asks for no
// collection); none registers no collector (the CLR alone).
using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace Gcpressure {

sealed class HostNode { public HostNode Next; public long N; }

public static class ForwardLoop {
  static readonly Dictionary<string, string> Opt = new Dictionary<string, string> {
    {"backend", "auto"}, {"policy", "pressure"}, {"workload", "steady"}, {"iters", "300"}, {"layers", "4"},
    {"d", "64"}, {"batch", "1024"}, {"host-heap-mib", "32"}, {"hard-limit", "64MiB"}, {"soft-limit", null},
    {"promote-share", "0.25"}, {"burst-every", "50"}, {"burst-fraction", "0.5"}, {"seed", "42"},
  };
  static readonly HashSet<string> Flags = new HashSet<string> {"json", "quiet", "check", "expect-oom", "no-sync"};
  static readonly HashSet<string> Given = new HashSet<string>();

  static int Usage(string msg) {
    Console.Error.WriteLine("ForwardLoop: " + msg + " (see the header of ForwardLoop.cs)");
    return 2;
  }

  static int Int(string k) { return int.Parse(Opt[k], CultureInfo.InvariantCulture); }
  static double Real(string k) { return double.Parse(Opt[k], CultureInfo.InvariantCulture); }

  // A seeded xorshift64* in [0, 1).
  static ulong rng_;
  static double Random() {
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return ((rng_ * 0x2545f4914f6cdd1dUL) >> 11) / 9007199254740992.0;
  }

  public static int Run(string[] args) {
    for (int i = 0; i < args.Length; ++i) {
      if (!args[i].StartsWith("--")) return Usage("unknown argument " + args[i]);
      string k = args[i].Substring(2);
      if (Flags.Contains(k)) { Given.Add(k); continue; }
      if (!Opt.ContainsKey(k)) return Usage("unknown option --" + k);
      if (i + 1 >= args.Length) return Usage("--" + k + " needs a value");
      Opt[k] = args[++i];
    }
    string[] workloads = {"steady", "promote", "burst", "varied"};
    if (System.Array.IndexOf(workloads, Opt["workload"]) < 0) return Usage("--workload must be steady, promote, burst or varied");
    string policy = Opt["policy"];
    if (policy != "none" && System.Array.IndexOf(Heap.PolicyNames(), policy) < 0)
      return Usage("--policy must be none or one of " + string.Join(", ", Heap.PolicyNames()));
    int iters, layers, d, batch, mib, every;
    try {
      iters = Int("iters"); layers = Int("layers"); d = Int("d"); batch = Int("batch"); mib = Int("host-heap-mib");
      every = Int("burst-every");
      Real("promote-share"); Real("burst-fraction"); ulong.Parse(Opt["seed"]);
    } catch (FormatException) {
      return Usage("a number option is not a number");
    }
    if (iters < 1 || layers < 1 || d < 1 || batch < 1 || every < 1) return Usage("sizes must be positive");
    using (var heap = new Heap(Opt["backend"], policy, Opt["hard-limit"], Opt["soft-limit"]))
      return Loop(heap, policy, iters, layers, d, batch, mib, every);
  }

  static int Loop(Heap heap, string policy, int iters, int layers, int d, int batch, int mib, int burstEvery) {
    bool oracle = policy == "explicit_free", quiet = Given.Contains("quiet");
    long hardLimit = (long)new Json(heap.StatsJson()).Num("hard_limit");
    rng_ = ulong.Parse(Opt["seed"]) * 0x9e3779b97f4a7c15UL + 1;
    var W = new DeviceArray[layers];
    var B = new DeviceArray[layers];
    for (int l = 0; l < layers; ++l) {
      W[l] = Ops.FillRandom(heap.Array((long)d * d), (ulong)l + 1, (float)(1 / Math.Sqrt(d)));
      B[l] = Ops.Fill(heap.Array(d), 0.01f);
    }
    DeviceArray input = Ops.FillRandom(heap.Array((long)d * batch), 0, 1);
    HostNode hostHeap = null;  // the program's live host heap: linked small objects
    long target = GC.GetTotalMemory(false) + (long)mib * (1 << 20);
    for (long n = 0; GC.GetTotalMemory(false) < target;)
      for (int k = 0; k < 1000; ++k, ++n) hostHeap = new HostNode {Next = hostHeap, N = n};

    var kept = new HashSet<DeviceArray>();
    var inflight = new List<DeviceArray>();
    long explicitFrees = 0;
    Action<DeviceArray> died = a => {
      if (oracle && a != null && !kept.Contains(a) && a.IsLive) { a.Free(); ++explicitFrees; }
    };
    Func<DeviceArray, DeviceArray> track = a => { if (oracle) inflight.Add(a); return a; };
    long chunkCap = Math.Max(4096, Math.Min(256L << 20, hardLimit / 16));
    var ring = new Dictionary<DeviceArray, int>();
    double share = Real("promote-share");
    long burstTotal = (long)(Real("burst-fraction") * hardLimit);
    double lo = Math.Log(4096), hi = Math.Log(chunkCap);
    string wl = Opt["workload"];

    long ooms = 0, firstOom = -1;
    double checksum = 0;
    var sw = System.Diagnostics.Stopwatch.StartNew();
    for (int it = 0; it < iters; ++it) {
      try {
        if (wl == "promote")
          foreach (var a in new List<DeviceArray>(ring.Keys))
            if (ring[a] <= it) { ring.Remove(a); kept.Remove(a); died(a); }
        DeviceArray x = input;
        for (int l = 0; l < layers; ++l) {
          DeviceArray t = track(Ops.MatMul(heap, W[l], x, d, batch));
          DeviceArray y = track(Ops.BiasRelu(heap, t, B[l], d, batch));
          if (wl == "promote")
            foreach (var a in new[] {t, y})
              if (Random() < share) { ring[a] = it + 1 + (int)(Random() * 50); kept.Add(a); }
          if (wl == "varied") {
            long bytes = (long)Math.Exp(lo + (hi - lo) * Random()) & ~3L;
            died(Ops.Fill(track(heap.Array(Math.Max(1, bytes / 4))), 0));
          }
          died(t);
          if (x != input) died(x);
          x = y;
        }
        var junk = new object[8];
        for (int k = 0; k < 300; ++k) junk[k % 8] = new int[] {k, k + 1};  // small host garbage
        if (it == iters - 1) checksum = Ops.Sum(x);
        died(x);
        if (wl == "burst" && (it + 1) % burstEvery == 0 && burstTotal > 0) {
          var held = new List<DeviceArray>();
          try {
            for (long got = 0; got < burstTotal; got += chunkCap)
              held.Add(Ops.Fill(track(heap.Array(Math.Max(1, Math.Min(chunkCap, burstTotal - got) / 4))), 0));
          } finally {
            foreach (var a in held) died(a);
            // Note [Dropping a burst in C#]: the list goes, not only its chunks.
            // Mono's SGen scans stacks conservatively, and a dead stack slot of
            // this frame (the foreach's enumerator over held) kept the previous
            // burst's List, and with it all its chunks, alive: measured 2 MiB of
            // a 4 MiB limit still live after two full collections and
            // WaitForPendingFinalizers (3 OOMs per run at iterations 99, 199,
            // 299: live 3.45 MiB at each; MONO_GC_PARAMS=stack-mark=precise the
            // same); 0 OOMs with the list cleared. The C++ loop's vector frees
            // its storage at the end of the burst: the same drop.
            held.Clear();
          }
        }
      } catch (OutOfMemoryException e) {
        ++ooms;
        if (firstOom < 0) firstOom = it;
        if (!quiet) Console.Error.WriteLine("iteration " + it + ": " + e.Message);
      }
      foreach (var a in inflight) died(a);
      inflight.Clear();
      heap.Iteration();
      if (!Given.Contains("no-sync")) heap.Synchronize();
    }
    double wall = sw.Elapsed.TotalSeconds;
    var s = new Json(heap.StatsJson());
    GC.KeepAlive(hostHeap);
    return Report(heap, s, policy, iters, wall, ooms, firstOom, explicitFrees, checksum, layers, d, batch, mib,
                  () => { foreach (var a in ring.Keys) if (a.IsLive) a.Free();
                          foreach (var a in W) a.Free(); foreach (var a in B) a.Free(); input.Free(); });
  }

  static int Report(Heap heap, Json s, string policy, int iters, double wall, long ooms, long firstOom, long frees,
                    double checksum, int layers, int d, int batch, int mib, Action teardown) {
    double full = s.Num("gc.by_kind.incremental_full") + s.Num("gc.by_kind.blocking_full");
    var kv = new List<KeyValuePair<string, string>>();
    Action<string, object> add = (k, v) => kv.Add(new KeyValuePair<string, string>(k,
      v == null ? "null" : v is string ? "\"" + v + "\"" : v is bool ? ((bool)v ? "true" : "false")
      : Convert.ToDouble(v).ToString("R", CultureInfo.InvariantCulture)));
    add("policy", policy); add("workload", Opt["workload"]); add("backend", new Json(heap.StatsJson()).Str("backend"));
    add("iterations", iters); add("ooms", ooms); add("first_oom_iteration", firstOom < 0 ? null : (object)firstOom);
    add("peak_live_bytes", s.Num("requested.peak")); add("peak_reserved_bytes", s.Num("reserved.peak"));
    add("collections_minor", s.Num("gc.by_kind.minor")); add("collections_full", full);
    add("max_pause_seconds", s.Num("gc.longest_pause_seconds")); add("gc_seconds", s.Num("gc.gc_seconds"));
    add("wall_seconds", wall); add("time_per_iter", wall / iters); add("finalized", s.Num("gc.finalized"));
    add("explicit_frees", frees); add("collections_runtime", s.Num("gc.runtime_collections"));
    add("runtime_full_collections", s.Num("gc.runtime_full_collections"));
    add("exposed_gc_seconds", s.Num("gc.exposed_gc_seconds")); add("gc_seconds_all", s.Num("gc.gc_seconds_all"));
    add("finalizer_wait_seconds", heap.FinalizerWaitSeconds);
    add("clr_collections_gen0", GC.CollectionCount(0)); add("clr_collections_gen1", GC.CollectionCount(1));
    add("runtime", "dotnet"); add("clr_version", Environment.Version.ToString()); add("synchronize", !Given.Contains("no-sync"));
    add("hard_limit_bytes", s.Num("hard_limit")); add("soft_limit_bytes", s.Num("soft_limit"));
    add("total_allocated_bytes", s.Num("requested.total")); add("library_ooms", s.Num("ooms"));
    add("external_bytes_at_end", heap.ExternalBytes); add("layers", layers); add("d", d); add("batch", batch);
    add("host_heap_mib", mib); add("seed", Opt["seed"]); add("checksum", checksum);
    var sb = new StringBuilder("{");
    for (int i = 0; i < kv.Count; ++i) sb.Append(i > 0 ? "," : "").Append('"').Append(kv[i].Key).Append("\":").Append(kv[i].Value);
    sb.Append('}');
    if (Given.Contains("json")) Console.WriteLine(sb.ToString());
    else Console.WriteLine(policy + " policy, " + Opt["workload"] + ": peak reserved " + s.Num("reserved.peak") / 1048576 +
                           " MiB, " + ooms + " OOMs, " + (wall / iters * 1e3).ToString("F2") + " ms/iteration");
    teardown();
    double hard = s.Num("hard_limit"), peak = s.Num("reserved.peak"), total = s.Num("requested.total");
    if (Given.Contains("expect-oom")) {
      if (ooms == 0) { Console.Error.WriteLine("ForwardLoop: CHECK FAILED: expected OOMs, got none"); return 1; }
      Console.Error.WriteLine("ForwardLoop: as expected, " + ooms + " of " + iters + " iterations hit OOM (first: " + firstOom + ")");
    } else if (Given.Contains("check")) {
      var errs = new List<string>();
      if (iters < 200) errs.Add("fewer than 200 iterations");
      if (total < 20 * hard) errs.Add("allocated less than 20x the hard limit");
      if (ooms != 0 || s.Num("ooms") != 0) errs.Add(ooms + " OOMs");
      if (peak > hard) errs.Add("peak reserved above the hard limit");
      if (double.IsNaN(checksum)) errs.Add("checksum is NaN");
      if (errs.Count > 0) { Console.Error.WriteLine("ForwardLoop: CHECK FAILED: " + string.Join("; ", errs)); return 1; }
      Console.Error.WriteLine("ForwardLoop: check passed: peak reserved <= hard limit, " + (total / hard).ToString("F1") +
                              "x the limit allocated, 0 OOMs");
    }
    return 0;
  }
}

}  // namespace Gcpressure
