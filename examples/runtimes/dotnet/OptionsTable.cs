// OptionsTable.cs — one behaviour per input, from .NET (ctest
// dotnet_options_table: `gcpressure_dotnet.exe options-table`): every bad
// value of tests/bad_options.txt given to new Heap(...) — through its named
// parameter where it has one (backend, policy, hardLimit, softLimit) and
// through `options` always — must fail with the C API's message after the
// option's name (Note [One error per bad value], core/src/config_detail.hpp;
// Note [Every option of the table], Gcpressure.cs). The expected texts are
// the C API's own, written at build time by
// examples/runtimes/bad_options_reasons.c into
// $GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED.
using System;
using System.Collections.Generic;
using System.IO;

namespace Gcpressure {

public static class OptionsTable {
  static int checks_;
  static readonly List<string> failures_ = new List<string>();

  static void Check(bool ok, string what) {
    ++checks_;
    if (!ok) failures_.Add(what);
  }

  // The text after "invalid value for NAME: " in msg, or why there is none.
  static string ReasonIn(string msg, string name) {
    string key = "invalid value for " + name + ": ";
    int at = msg.IndexOf(key, StringComparison.Ordinal);
    return at < 0 ? "<no '" + key + "' in: " + msg + ">" : msg.Substring(at + key.Length);
  }

  // The exception a heap made by `make` throws, or null when it was made.
  static Exception HeapError(Func<Heap> make) {
    try {
      make().Dispose();
      return null;
    } catch (Exception e) {
      return e;
    }
  }

  // The ways one option reaches the library: `options` always, and the named parameter where it has one.
  static List<KeyValuePair<string, Func<Heap>>> EntryPoints(string name, object v) {
    var ways = new List<KeyValuePair<string, Func<Heap>>>();
    string backend = name == "backend" ? null : "host";
    ways.Add(new KeyValuePair<string, Func<Heap>>("options", () =>
        new Heap(backend, options: new Dictionary<string, object> { { name, v } })));
    string text = v as string;
    if (text == null) return ways;
    if (name == "backend") ways.Add(new KeyValuePair<string, Func<Heap>>("backend:", () => new Heap(text)));
    if (name == "policy") ways.Add(new KeyValuePair<string, Func<Heap>>("policy:", () => new Heap("host", text)));
    if (name == "hard_limit")
      ways.Add(new KeyValuePair<string, Func<Heap>>("hardLimit:", () => new Heap("host", hardLimit: text)));
    if (name == "soft_limit")
      ways.Add(new KeyValuePair<string, Func<Heap>>("softLimit:", () => new Heap("host", softLimit: text)));
    return ways;
  }

  static void CheckRow(string name, object v, string reason) {
    foreach (var way in EntryPoints(name, v)) {
      string what = name + " = " + (v is string ? "'" + v + "'" : v + " (" + v.GetType().Name + ")") + " by " + way.Key;
      Exception e = HeapError(way.Value);
      Check(e != null, what + ": accepted by new Heap");
      if (e == null) continue;
      Check(e is ArgumentException, what + ": " + e.GetType().Name + ": " + e.Message);
      string got = ReasonIn(e.Message, name);
      Check(got == reason, what + ": got '" + got + "', the C API says '" + reason + "'");
      int said = e.Message.Split(new[] { "gcpressure" }, StringSplitOptions.None).Length - 1;
      Check(said == 1, what + ": 'gcpressure' said " + said + " times in: " + e.Message);
    }
  }

  // The exception h.SetLimits(soft, hard) throws, or null.
  static Exception SetLimitsError(Heap h, object soft, object hard) {
    try {
      h.SetLimits(soft, hard);
      return null;
    } catch (Exception e) {
      return e;
    }
  }

  static string Show(object v) { return v == null ? "null" : v is string ? "'" + v + "'" : v + " (" + v.GetType().Name + ")"; }

  // Heap.SetLimits takes the limits as the constructor does (Note [Limits as
  // text], Gcpressure.cs): each bad limit of the table is refused with the
  // same text and leaves the limits as they were; good ones in every form.
  static void SetLimitsTable(string path) {
    const long MiB = 1 << 20;
    var h = new Heap("host", "none", "64 MB", "32MiB", new Dictionary<string, object> { { "host_capacity", "1GiB" } });
    Func<string> limits = () => { var s = new Json(h.StatsJson()); return s.Num("soft_limit") / MiB + "/" + s.Num("hard_limit") / MiB; };
    foreach (string line in File.ReadAllLines(path)) {
      string[] f = line.Split('\t');
      if (f.Length != 3 || (f[0] != "soft_limit" && f[0] != "hard_limit")) continue;
      bool soft = f[0] == "soft_limit";
      string what = "SetLimits(" + (soft ? Show(f[1]) + ", null" : "null, " + Show(f[1])) + ")";
      Exception e = soft ? SetLimitsError(h, f[1], null) : SetLimitsError(h, null, f[1]);
      Check(e is ArgumentException, what + ": " + (e == null ? "accepted" : e.GetType().Name + ": " + e.Message));
      if (e == null) continue;
      string got = ReasonIn(e.Message, f[0]);
      Check(got == f[2], what + ": got '" + got + "', the C API says '" + f[2] + "'");
      int said = e.Message.Split(new[] { "gcpressure" }, StringSplitOptions.None).Length - 1;
      Check(said == 1, what + ": 'gcpressure' said " + said + " times in: " + e.Message);
    }
    Check(limits() == "32/64", "a refused limit changed one: " + limits());
    // Good values: size strings, a percentage of the device (1 GiB), bytes of any integer type, 0/null unchanged.
    var good = new[] {
      new object[] { "16 MB", "32MiB", "16/32" }, new object[] { null, "50%", "16/512" },
      new object[] { 8 * MiB, 0, "8/512" }, new object[] { null, (int)(96 * MiB), "8/96" },
      new object[] { null, "25%", "8/256" }, new object[] { (ulong)(4 * MiB), null, "4/256" },
      new object[] { null, null, "4/256" } };
    foreach (var g in good) {
      Exception e = SetLimitsError(h, g[0], g[1]);
      Check(e == null && limits() == (string)g[2], "SetLimits(" + Show(g[0]) + ", " + Show(g[1]) + "): " +
            (e == null ? limits() : e.Message) + ", want " + g[2]);
    }
    // Refusals of other kinds: .NET types, negative bytes, N%avail, soft above hard; after Dispose.
    var bad = new[] {
      new object[] { 1.5, null, "SetLimits: soft_limit must be an integer or a string, not Double" },
      new object[] { null, true, "SetLimits: hard_limit must be an integer or a string, not Boolean" },
      new object[] { -1, null, "SetLimits: soft_limit must be a non-negative number of bytes, not -1" },
      new object[] { null, "80%avail", "'80%avail' (N%avail follows the memory at run time" },
      new object[] { "1GiB", null, "soft limit above hard limit" },
      // The number 0 leaves a limit; the text "0" is the constructor's error.
      new object[] { "0", null, "soft_limit: '0' (a size must be at least 1 byte)" } };
    foreach (var b in bad) {
      Exception e = SetLimitsError(h, b[0], b[1]);
      Check(e is ArgumentException && e.Message.StartsWith("gcpressure: ") && e.Message.Contains((string)b[2]),
            "SetLimits(" + Show(b[0]) + ", " + Show(b[1]) + "): " + (e == null ? "accepted" : e.GetType().Name + ": " + e.Message));
    }
    Check(limits() == "4/256", "a refused call changed a limit: " + limits());
    h.Dispose();
    foreach (var args in new[] { new object[] { 8 * MiB, 0 }, new object[] { "16 MB", null }, new object[] { null, "50%" } }) {
      Exception e = SetLimitsError(h, args[0], args[1]);
      Check(e is ObjectDisposedException && e.Message.Contains("the allocator was destroyed"),
            "SetLimits(" + Show(args[0]) + ", " + Show(args[1]) + ") after Dispose: " + (e == null ? "accepted" : e.Message));
    }
  }

  public static int Run() {
    string path = Environment.GetEnvironmentVariable("GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED");
    if (string.IsNullOrEmpty(path)) {
      Console.Error.WriteLine("GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED is not set (ctest sets it)");
      return 2;
    }
    int rows = 0;
    foreach (string line in File.ReadAllLines(path)) {
      if (line.Length == 0) continue;
      string[] f = line.Split('\t');
      if (f.Length != 3) throw new FormatException(path + ": malformed line: " + line);
      ++rows;
      CheckRow(f[0], f[1], f[2]);
      // An integer is also given as a long: the binding writes it in decimal,
      // so the options table sees the same text.
      long n;
      if (long.TryParse(f[1], out n) && n.ToString() == f[1]) CheckRow(f[0], n, f[2]);
    }
    Check(rows >= 20, "at least 20 bad values in " + path + " (" + rows + ")");
    try {  // every key of the table, in .NET's own types
      var good = new Dictionary<string, object> {
        { "gc_budget", 0.1 }, { "every_n", 2 }, { "pool", false }, { "verbose", false },
        { "async_release_threshold", 0 }, { "host_capacity", "1GiB" }, { "device", 0 } };
      using (var h = new Heap("host", "pressure", (16 << 20).ToString(), "8 MB", good)) {
        var s = new Json(h.StatsJson());
        Check(s.Num("hard_limit") == 16 << 20 && s.Num("soft_limit") == 8 << 20, "limits from 16 MiB and \"8 MB\"");
      }
    } catch (Exception e) {
      Check(false, "good values of every kind refused: " + e.Message);
    }
    Check(HeapError(() => new Heap("host", options: new Dictionary<string, object> { { "hard_limt", "8MiB" } }))
          is ArgumentException, "a misspelt option is an error");
    SetLimitsTable(path);
    foreach (string f in failures_) Console.WriteLine("FAIL " + f);
    Console.WriteLine((checks_ - failures_.Count) + " passed, " + failures_.Count + " failed");
    return failures_.Count == 0 ? 0 : 1;
  }
}

}  // namespace Gcpressure
