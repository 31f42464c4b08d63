#!/usr/bin/env node
'use strict';
// forward_loop.js — the Flux-style forward loop of the C++ forward_loop
// (bench/forward), in Node.js, over the addon gcpressure.node.
//
// `layers` Dense layers y = relu.(W*x .+ b): every layer allocates its matmul
// output and its own output as DeviceArrays (JS objects whose finalizer
// returns the block) and the loop drops them. A live host heap of
// --host-heap-mib MiB of small linked JS objects makes V8's own whole-heap
// collections rare, and a few hundred small objects per iteration stand for
// the rest of a program. Compute: the CPU, synchronously, on the host backend
// (the addon's matmul and biasRelu; the C API has no compute stream).
//
//   node forward_loop.js [--backend auto|host] [--policy NAME|none]
//     [--workload steady|promote|burst|varied] [--iters N] [--layers N] [--d N] [--batch N]
//     [--host-heap-mib N] [--hard-limit SIZE] [--soft-limit SIZE] [--promote-share X]
//     [--burst-every N] [--burst-fraction X] [--seed N] [--no-sync] [--json] [--quiet]
//     [--check] [--expect-oom]
//
// Policies: one of the library's policy_names() (gp.policyNames()), or none.
//   explicit_free   the oracle: the loop frees each array (a.free()) the moment it dies;
//   runtime_native  V8's own mechanism only: each array's bytes are reported with
//                   napi_adjust_external_memory, the library asks for no collection;
//   none            no collector registered and nothing reported: V8 alone.
// The workloads are the C++ loop's (bench/forward/workload.cpp, Note [The
// workloads]; examples/runtimes/python/workloads.py says them in words), drawn
// from a seeded xorshift: the same distributions, other draws. Each iteration
// ends with the iteration hint, then heap.synchronize() (the sync point).
//
// With --json the last line is one JSON object with the keys of the Lua and
// C++ loops' summaries (policy, workload, backend, iterations, ooms,
// first_oom_iteration, peak_live_bytes, peak_reserved_bytes, collections_minor,
// collections_full, collections_full_steady, max_pause_seconds, gc_seconds,
// wall_seconds, time_per_iter, finalized, ...) and V8's own counts.
// --check exits 1 unless the run had >= 200 iterations, allocated >= 20x the
// hard limit, had zero OOMs and kept peak reserved within the hard limit.
// --expect-oom exits 1 unless the run hit OOMs.
const gp = require('./gcpressure.js');

const opts = {
  backend: 'auto', policy: 'pressure', workload: 'steady', iters: 300, layers: 4, d: 64, batch: 1024,
  host_heap_mib: 32, hard_limit: '64MiB', soft_limit: undefined, promote_share: 0.25, burst_every: 50,
  burst_fraction: 0.5, seed: 42, json: false, quiet: false, check: false, expect_oom: false, no_sync: false,
};
const FLAGS = new Set(['json', 'quiet', 'check', 'expect_oom', 'no_sync']);
const INTS = new Set(['iters', 'layers', 'd', 'batch', 'host_heap_mib', 'burst_every', 'seed']);
const REALS = new Set(['promote_share', 'burst_fraction']);
const WORKLOADS = ['steady', 'promote', 'burst', 'varied'];

function usage(msg) {
  if (msg) process.stderr.write(`forward_loop.js: ${msg}\n`);
  process.stderr.write('usage: node forward_loop.js [--backend B] [--policy P|none] [--workload W] [--iters N] ...' +
                       ' (see the header of forward_loop.js)\n');
  process.exit(2);
}

const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; ++i) {
  const m = /^--([a-z-]+)$/.exec(argv[i]);
  if (!m) usage(`unknown argument ${argv[i]}`);
  const key = m[1].replace(/-/g, '_');
  if (!(key in opts)) usage(`unknown option --${m[1]}`);
  if (FLAGS.has(key)) { opts[key] = true; continue; }
  const v = argv[++i];
  if (v === undefined) usage(`--${m[1]} needs a value`);
  if (INTS.has(key)) {
    if (!/^\d+$/.test(v)) usage(`--${m[1]} needs a non-negative integer`);
    opts[key] = Number(v);
  } else if (REALS.has(key)) {
    const x = Number(v);
    if (!(x >= 0 && x <= 1)) usage(`--${m[1]} needs a number in [0, 1]`);
    opts[key] = x;
  } else {
    opts[key] = v;
  }
}
if (opts.iters < 1 || opts.layers < 1 || opts.d < 1 || opts.batch < 1 || opts.burst_every < 1) usage('sizes must be positive');
if (!WORKLOADS.includes(opts.workload)) usage(`--workload must be ${WORKLOADS.join(', ')}`);
if (opts.policy !== 'none' && !gp.policyNames().includes(opts.policy))
  usage(`--policy must be none or one of ${gp.policyNames().join(', ')}`);

const heap = gp.open({backend: opts.backend, policy: opts.policy, hard_limit: opts.hard_limit,
                      soft_limit: opts.soft_limit});
const oracle = opts.policy === 'explicit_free';
const {d, batch, layers} = opts;
const hardLimit = JSON.parse(heap.stats()).hard_limit;

// A seeded xorshift64* in [0, 1).
let rngState = BigInt(opts.seed) * 0x9e3779b97f4a7c15n + 1n;
const MASK = (1n << 64n) - 1n;
function random() {
  rngState ^= rngState >> 12n;
  rngState ^= (rngState << 25n) & MASK;
  rngState ^= rngState >> 27n;
  return Number(((rngState * 0x2545f4914f6cdd1dn) & MASK) >> 11n) / 2 ** 53;
}

// The model: weights and biases live for the whole run.
const W = [], B = [];
for (let l = 0; l < layers; ++l) {
  W.push(heap.array(d * d).fillRandom(l + 1, 1 / Math.sqrt(d)));
  B.push(heap.array(d).fill(0.01));
}
const input = heap.array(d * batch).fillRandom(0, 1);

// The simulated program's live host heap: linked small objects.
let hostHeap = null;
{
  const v8 = require('v8');
  const target = v8.getHeapStatistics().used_heap_size + opts.host_heap_mib * 2 ** 20;
  for (let n = 0; v8.getHeapStatistics().used_heap_size < target;)
    for (let k = 0; k < 1000; ++k, ++n) hostHeap = {next: hostHeap, n};
}

// Arrays and the oracle. kept: arrays a workload holds past their death in the chain.
const kept = new Set();
let inflight = [];  // the oracle's: what an OOM left behind is freed too
let explicitFrees = 0;
function died(a) {
  if (oracle && a && !kept.has(a) && a.isLive()) {
    a.free();
    ++explicitFrees;
  }
}
function track(a) {
  if (oracle) inflight.push(a);
  return a;
}
const newArray = (n) => track(heap.array(n));

// The workloads.
const chunkCap = Math.max(4096, Math.min(256 * 2 ** 20, Math.floor(hardLimit / 16)));
const workload = {};
if (opts.workload === 'promote') {
  const ring = new Map();  // array -> the iteration at whose start it dies
  workload.beginIteration = (it) => {
    for (const [a, expiry] of ring) if (expiry <= it) { ring.delete(a); kept.delete(a); died(a); }
  };
  workload.afterLayer = (it, t, y) => {
    for (const a of [t, y]) if (random() < opts.promote_share) {
      ring.set(a, it + 1 + Math.floor(random() * 50));
      kept.add(a);
    }
  };
  workload.release = () => {
    for (const a of ring.keys()) if (a.isLive()) a.free();
    ring.clear();
  };
} else if (opts.workload === 'burst') {
  const total = Math.floor(opts.burst_fraction * hardLimit);
  workload.endIteration = (it) => {
    if ((it + 1) % opts.burst_every !== 0 || total === 0) return;
    const held = [];
    try {
      for (let got = 0; got < total; got += chunkCap)
        held.push(newArray(Math.max(1, Math.floor(Math.min(chunkCap, total - got) / 4))).fill(0));
    } finally {
      for (const a of held) died(a);
    }
  };
} else if (opts.workload === 'varied') {
  const lo = Math.log(4096), hi = Math.log(chunkCap);
  workload.afterLayer = () => {
    const bytes = Math.floor(Math.exp(lo + (hi - lo) * random())) & ~3;
    died(newArray(Math.max(1, bytes / 4)).fill(0));
  };
}

function forward(it, x) {
  for (let l = 0; l < layers; ++l) {
    const t = track(heap.matmul(W[l], x, d, batch));  // W*x: the broadcast's temporary
    const y = track(heap.biasRelu(t, B[l], d, batch));  // relu.(t .+ b): the layer's output
    if (workload.afterLayer) workload.afterLayer(it, t, y);
    died(t);
    if (x !== input) died(x);
    x = y;
  }
  const junk = [];
  for (let k = 0; k < 300; ++k) junk[k % 8] = {k, k1: k + 1};  // small host garbage
  return x;
}

// Blocking whole-heap collections of any origin: the policy's and V8's own.
const blockingAny = (st) => st.gc.by_kind.blocking_full + (st.gc.blocking_cycles || 0) +
                            (st.gc.runtime_full_collections || 0);

let ooms = 0, firstOom = null, steadyBase = 0, steadyAny = 0, checksum = 0;
const steadyAt = Math.floor(opts.iters / 10);
const t0 = process.hrtime.bigint();
for (let it = 0; it < opts.iters; ++it) {
  try {
    if (workload.beginIteration) workload.beginIteration(it);
    const y = forward(it, input);
    if (it === opts.iters - 1) checksum = y.sum();
    died(y);
    if (workload.endIteration) workload.endIteration(it);
  } catch (e) {
    if (e.code !== 'GCPRESSURE_ERR_OOM') throw e;
    ++ooms;
    if (firstOom === null) firstOom = it;
    if (!opts.quiet) process.stderr.write(`iteration ${it}: ${e.message}\n`);
  }
  for (const a of inflight) died(a);
  inflight = [];
  heap.iteration();
  if (!opts.no_sync) heap.synchronize();
  if (it + 1 === steadyAt) {
    const st = JSON.parse(heap.stats());
    steadyBase = st.gc.by_kind.blocking_full;
    steadyAny = blockingAny(st);
  }
}
const wall = Number(process.hrtime.bigint() - t0) / 1e9;

const s = JSON.parse(heap.stats());
const k = s.gc.by_kind, g = s.gc, info = heap.info();
const summary = {
  policy: opts.policy, workload: opts.workload, backend: s.backend, iterations: opts.iters, ooms,
  first_oom_iteration: firstOom,
  peak_live_bytes: s.requested.peak, peak_reserved_bytes: s.reserved.peak,
  collections_minor: k.minor, collections_full: k.incremental_full + k.blocking_full,
  collections_full_steady: blockingAny(s) - steadyAny, collections_full_steady_any: blockingAny(s) - steadyAny,
  collections_full_steady_policy: k.blocking_full - steadyBase,
  max_pause_seconds: g.longest_pause_seconds, gc_seconds: g.gc_seconds, wall_seconds: wall,
  time_per_iter: wall / opts.iters, finalized: g.finalized, explicit_frees: explicitFrees,
  collections_runtime: g.runtime_collections, exposed_gc_seconds: g.exposed_gc_seconds, gc_seconds_all: g.gc_seconds_all,
  v8_scavenges: info.v8Scavenges, v8_mark_compacts: info.v8MarkCompacts, v8_gc_seconds: info.v8GcSeconds,
  runtime: 'node', node_version: process.version, synchronize: !opts.no_sync,
  hard_limit_bytes: s.hard_limit, soft_limit_bytes: s.soft_limit, total_allocated_bytes: s.requested.total,
  library_ooms: s.ooms, external_bytes_at_end: info.externalBytes, layers, d, batch,
  host_heap_mib: opts.host_heap_mib, seed: opts.seed, checksum,
  bounds: {
    collections_runtime: "V8's own scavenges and mark-compacts, exact (GC prologue/epilogue callbacks)",
    runtime_gc_seconds: "V8's own: prologue-to-epilogue, a lower bound (incremental marking steps are not timed)",
  },
};
const mib = (n) => `${(n / 2 ** 20).toFixed(2)} MiB`;
if (opts.json) {
  console.log(JSON.stringify(summary));
} else {
  console.log(`${opts.policy} policy, ${opts.workload} workload, ${s.backend} backend, Node ${process.version}: ` +
              `${opts.iters} iterations in ${wall.toFixed(2)} s`);
  console.log(`  peak reserved ${mib(s.reserved.peak)} (hard limit ${mib(s.hard_limit)}), peak live ` +
              `${mib(s.requested.peak)}, allocated ${mib(s.requested.total)} in all`);
  console.log(`  collections: minor ${k.minor}, whole-heap ${k.incremental_full + k.blocking_full}; V8's own: ` +
              `${info.v8Scavenges} scavenges, ${info.v8MarkCompacts} mark-compacts; finalized ${g.finalized}, OOMs ${ooms}`);
}

let rc = 0;
if (opts.expect_oom) {
  if (ooms === 0) {
    process.stderr.write('forward_loop.js: CHECK FAILED: expected OOMs, got none\n');
    rc = 1;
  } else {
    process.stderr.write(`forward_loop.js: as expected, ${ooms} of ${opts.iters} iterations hit OOM (first: ${firstOom})\n`);
  }
} else if (opts.check) {
  const errs = [];
  if (opts.iters < 200) errs.push('fewer than 200 iterations');
  if (s.requested.total < 20 * s.hard_limit) errs.push(`allocated ${mib(s.requested.total)}, less than 20x the hard limit`);
  if (ooms !== 0 || s.ooms !== 0) errs.push(`${ooms} OOMs (library: ${s.ooms})`);
  if (s.reserved.peak > s.hard_limit) errs.push(`peak reserved ${mib(s.reserved.peak)} above the hard limit`);
  if (Number.isNaN(checksum)) errs.push('checksum is NaN');
  if (errs.length) {
    process.stderr.write(`forward_loop.js: CHECK FAILED: ${errs.join('; ')}\n`);
    rc = 1;
  } else {
    process.stderr.write(`forward_loop.js: check passed: peak reserved ${mib(s.reserved.peak)} <= hard limit, ` +
                         `${(s.requested.total / s.hard_limit).toFixed(1)}x the limit allocated, 0 OOMs\n`);
  }
}
// Teardown: the model and what a workload still holds are freed; close()
// collects the rest before it destroys the allocator.
if (workload.release) workload.release();
for (const a of [...W, ...B, input]) a.free();
heap.close();
process.exitCode = rc;
