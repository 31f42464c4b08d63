// Ops.cs — the forward loop's compute on DeviceArrays (CPU, host backend) and
// a small JSON reader for the library's stats.
using System;
using System.Collections.Generic;
using System.Globalization;

namespace Gcpressure {

public static class Ops {
  static IntPtr P(DeviceArray a, string what) {
    if (a == null) throw new ArgumentNullException("a", "gcpressure: " + what + ": the array is null");
    return a.Ptr(what);
  }

  static void SameHeap(Heap h, DeviceArray p, DeviceArray q, string what) {
    if (p == null || q == null) throw new ArgumentNullException("array", "gcpressure: " + what + ": an array is null");
    if (p.Owner != h || q.Owner != h) throw new ArgumentException("gcpressure: " + what + ": arrays of another heap");
  }

  static void Dims(long d, long n, string what) {
    if (d < 1 || d > (1 << 20) || n < 1 || n > (1 << 30))
      throw new ArgumentOutOfRangeException("d", "gcpressure: " + what + ": dimensions must be in 1..2^20 (d), 1..2^30 (n)");
  }

  // y = W (d x d) * x (d x n), column-major, a new array.
  public static unsafe DeviceArray MatMul(Heap h, DeviceArray W, DeviceArray x, int d, int n) {
    SameHeap(h, W, x, "MatMul");
    Dims(d, n, "MatMul");
    if (W.Length < (long)d * d || x.Length < (long)d * n)
      throw new ArgumentException("gcpressure: MatMul: W is smaller than d x d or x smaller than d x n");
    float* w = (float*)W.Ptr("MatMul"), xs = (float*)x.Ptr("MatMul");
    DeviceArray y = h.Array((long)d * n);
    float* ys = (float*)y.Ptr("MatMul");
    for (long j = 0; j < n; ++j) {
      float* yj = ys + d * j;
      for (int i = 0; i < d; ++i) yj[i] = 0;
      for (int k = 0; k < d; ++k) {
        float xk = xs[d * j + k];
        float* wk = w + (long)d * k;
        for (int i = 0; i < d; ++i) yj[i] += wk[i] * xk;
      }
    }
    GC.KeepAlive(W);  // no finalizer may release an operand while the loop reads it
    GC.KeepAlive(x);
    return y;
  }

  // y = relu.(t .+ b), t d x n, b of length d, a new array.
  public static unsafe DeviceArray BiasRelu(Heap h, DeviceArray t, DeviceArray b, int d, int n) {
    SameHeap(h, t, b, "BiasRelu");
    Dims(d, n, "BiasRelu");
    if (t.Length < (long)d * n || b.Length < d)
      throw new ArgumentException("gcpressure: BiasRelu: t is smaller than d x n or b shorter than d");
    float* ts = (float*)t.Ptr("BiasRelu"), bs = (float*)b.Ptr("BiasRelu");
    DeviceArray y = h.Array((long)d * n);
    float* ys = (float*)y.Ptr("BiasRelu");
    for (long j = 0; j < n; ++j)
      for (int i = 0; i < d; ++i) {
        float v = ts[d * j + i] + bs[i];
        ys[d * j + i] = v > 0 ? v : 0;
      }
    GC.KeepAlive(t);
    GC.KeepAlive(b);
    return y;
  }

  public static unsafe DeviceArray Fill(DeviceArray a, float v) {
    float* x = (float*)P(a, "Fill");
    for (long i = 0; i < a.Length; ++i) x[i] = v;
    GC.KeepAlive(a);
    return a;
  }

  // Uniform in [-scale, scale) (xorshift, as the Lua and Node modules).
  public static unsafe DeviceArray FillRandom(DeviceArray a, ulong seed, float scale) {
    float* x = (float*)P(a, "FillRandom");
    ulong s = seed * 0x9e3779b97f4a7c15UL + 1;
    for (long i = 0; i < a.Length; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      x[i] = scale * ((float)(s >> 40) / (float)(1 << 23) - 1.0f);
    }
    GC.KeepAlive(a);
    return a;
  }

  public static unsafe double Sum(DeviceArray a) {
    float* x = (float*)P(a, "Sum");
    double s = 0;
    for (long i = 0; i < a.Length; ++i) s += x[i];
    GC.KeepAlive(a);
    return s;
  }
}

// The library's stats JSON as nested dictionaries; Num("gc.by_kind.minor").
public sealed class Json {
  readonly Dictionary<string, object> root_;
  readonly string s_;
  int pos_;

  public Json(string s) { s_ = s; root_ = (Dictionary<string, object>)Value(); }

  public double Num(string path, double dflt = 0) {
    object cur = root_;
    foreach (string key in path.Split('.')) {
      var d = cur as Dictionary<string, object>;
      if (d == null || !d.TryGetValue(key, out cur)) return dflt;
    }
    return cur is double ? (double)cur : dflt;
  }

  public string Str(string key) {
    object v;
    return root_.TryGetValue(key, out v) ? v as string : null;
  }

  void Ws() { while (pos_ < s_.Length && char.IsWhiteSpace(s_[pos_])) ++pos_; }

  object Value() {
    Ws();
    char c = s_[pos_];
    if (c == '{') {
      var d = new Dictionary<string, object>();
      ++pos_;
      Ws();
      if (s_[pos_] == '}') { ++pos_; return d; }
      while (true) {
        Ws();
        string k = (string)Value();
        Ws();
        ++pos_;  // ':'
        d[k] = Value();
        Ws();
        if (s_[pos_++] == '}') return d;
      }
    }
    if (c == '[') {
      var l = new List<object>();
      ++pos_;
      Ws();
      if (s_[pos_] == ']') { ++pos_; return l; }
      while (true) {
        l.Add(Value());
        Ws();
        if (s_[pos_++] == ']') return l;
      }
    }
    if (c == '"') {
      var sb = new System.Text.StringBuilder();
      for (++pos_; s_[pos_] != '"'; ++pos_) {
        if (s_[pos_] == '\\') ++pos_;
        sb.Append(s_[pos_]);
      }
      ++pos_;
      return sb.ToString();
    }
    foreach (var word in new[] {"true", "false", "null"})
      if (string.CompareOrdinal(s_, pos_, word, 0, word.Length) == 0) {
        pos_ += word.Length;
        return word == "null" ? null : (object)(word == "true");
      }
    int start = pos_;
    while (pos_ < s_.Length && "+-0123456789.eE".IndexOf(s_[pos_]) >= 0) ++pos_;
    return double.Parse(s_.Substring(start, pos_ - start), CultureInfo.InvariantCulture);
  }
}

}  // namespace Gcpressure
