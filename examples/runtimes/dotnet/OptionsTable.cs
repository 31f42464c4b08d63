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
    foreach (string f in failures_) Console.WriteLine("FAIL " + f);
    Console.WriteLine((checks_ - failures_.Count) + " passed, " + failures_.Count + " failed");
    return failures_.Count == 0 ? 0 : 1;
  }
}

}  // namespace Gcpressure
