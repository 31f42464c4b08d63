"""Session 22's Python package table from results.json (h200_python.sh): per framework and cycle
variant, gcpressure's and the framework's own median peak / live, time ratio, OOMs; the
alloc+free pair; the numba-cuda suite counts. Usage: python3 table.py (in this folder)."""
import json
d = json.load(open('results.json'))
def summ(key):
    return [r for r in d[key] if r.get('summary')][-1]
for fw in ['cupy', 'numba']:
    g, o = summ(f'cycles_{fw}_gcpressure'), summ(f'cycles_{fw}_own')
    print(f"{fw}: variant | live MiB | gcpressure peak/live | own peak/live | time gcp/own | OOMs gcp/own")
    for v, a in g.items():
        if not isinstance(a, dict) or 'seconds_per_iter_median' not in a:
            continue
        b = o.get(v, {})
        t = a['seconds_per_iter_median'] / b['seconds_per_iter_median'] if b.get('seconds_per_iter_median') else float('nan')
        print(f"  {v:14s} {a['live_bytes'] / 2**20:6.0f} {a.get('peak_over_live_median')} {b.get('peak_over_live_median')} "
              f"{t:.2f} {a.get('ooms')}/{b.get('ooms')}")
p = d['pair_cupy'][0]
print('pair (us, median of 5 rounds x 20000):', {k: {m: round(v[m]['median'], 3) for m in v} for k, v in p['us_per_pair'].items()},
      'ratios', p['ratio_gcpressure'], p['ratio_gcpressure_py'])
for k in ['numba_suite_default', 'numba_suite_gcpressure']:
    r = d[k][0]
    print(k, {x: r.get(x) for x in ('ran', 'failures', 'errors', 'skipped_tests', 'expected_failures', 'failed_names', 'manager_in_use')})
