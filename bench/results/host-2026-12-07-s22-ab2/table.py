"""Host A/B table (session 22): per file, pressure's peak and time over the oracle's of the same
process (each pressure line is paired with the next explicit_free line), medians (min-max),
exposed GC share. Usage: python3 table.py (in this folder)."""
import glob, json, statistics as st
for f in sorted(glob.glob('*.jsonl')):
    rows = [json.loads(l) for l in open(f) if l.startswith('{')]
    p = [r for r in rows if r['policy'] == 'pressure']; o = [r for r in rows if r['policy'] == 'explicit_free']
    pk = [a['peak_reserved_bytes'] / b['peak_reserved_bytes'] for a, b in zip(p, o)]
    tm = [a['time_per_iter'] / b['time_per_iter'] for a, b in zip(p, o)]
    ex = [a['exposed_gc_fraction'] * 100 for a in p]
    mi = [a['collections_minor'] for a in p]
    print(f"{f:18s} n={len(pk)} peak {st.median(pk):.2f} ({min(pk):.2f}-{max(pk):.2f}) time {st.median(tm):.3f} "
          f"({min(tm):.2f}-{max(tm):.2f}) exposed {st.median(ex):.1f}% minors {st.median(mi):.0f}")
