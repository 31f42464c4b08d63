'use strict';
// test_fuzz.js — a fuzz-style test of the Node addon (ctest node_fuzz): a
// seeded random sequence of calls, well- and ill-formed (wrong types, sizes,
// freed arrays, arrays of another heap, calls after close), checked after
// every call:
//   - a call either succeeds or throws an Error whose code is a gcpressure
//     status name (GCPRESSURE_ERR_*) and whose message starts "gcpressure:";
//     V8's own receiver check (TypeError "Illegal invocation") is the one
//     other exception allowed; nothing crashes the process;
//   - the library's live bytes are at least those of the arrays the test
//     holds, and after the test drops all and collects they are exactly those.
//   node test_fuzz.js [--ops N] [--seed N]
const assert = require('assert');
const gp = require('./gcpressure.js');

const args = process.argv.slice(2);
const arg = (name, dflt) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) : dflt);
const OPS = arg('--ops', 20000);
let seed = arg('--seed', 1) >>> 0 || 1;
const rand = () => {  // xorshift32
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 2 ** 32;
};
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const gc = gp.gc();
const AP = gp.DeviceArray.prototype;

const junk = [undefined, null, 'x', '7', -1, 1.5, NaN, Infinity, 2 ** 60, {}, [], () => 0, Symbol('s'), 10n, true];
const sizes = () => pick([1, 3, 64, 1024, 65536, 262144, 0, -1, 1.25, 2 ** 40, 2 ** 53, 'x']);
let heap = gp.open({backend: 'host', hard_limit: '16MiB', policy: pick(['pressure', 'explicit_free', 'runtime_native'])});
const other = gp.open({backend: 'host', hard_limit: '4MiB'});
const foreign = other.array(16);
let held = [];  // arrays this test still references (live or freed)
let closed = false, calls = 0, errors = 0;
const heldBytes = () => held.reduce((s, a) => s + (a.isLive() ? 4 * a.length : 0), 0);
const anyArray = () => pick([...held.slice(-8), foreign, pick(junk)].filter((x) => x !== undefined || rand() < 0.1));

const ops = [
  () => { const a = heap.array(sizes()); held.push(a); },
  () => { const a = heap.array(pick([16, 256, 4096])); if (rand() < 0.5) held.push(a); },  // dropped garbage
  () => { const a = pick(held); if (a) a.free(); },
  // Through the prototype, so that junk receivers reach the addon's checks.
  () => AP.sum.call(anyArray()),
  () => AP.free.call(anyArray()),
  () => AP.fill.call(anyArray(), pick([0, 1.5, 'x', NaN])),
  () => AP.fillRandom.call(anyArray(), pick([1, 2, 'x']), pick([1, undefined])),
  () => { held.push(heap.matmul(anyArray(), anyArray(), pick([1, 2, 4, 0, 'x', 1e9]), pick([1, 2, 8, -3]))); },
  () => { held.push(heap.biasRelu(anyArray(), anyArray(), pick([1, 2, 4]), pick([1, 2, 8, 2 ** 31]))); },
  () => heap.iteration(),
  () => heap.synchronize(),
  () => heap.collectMinor(),
  // Limits as bytes or size strings, good and bad (Note [Limits as text]).
  () => heap.setLimits(pick([undefined, null, 0, 4 << 20, 8 << 20, '8 MB', '1%', 'x', '80%avail', -1, 1.5, {}]),
                       pick([undefined, 0, 16 << 20, 32 << 20, '16MiB', '3%', '64 MBx', '0', '150%', true])),
  () => heap.drain(),
  () => (rand() < 0.5 ? gc({type: pick(['minor', 'major']), execution: 'sync'}) : gc()),
  () => { const s = JSON.parse(heap.stats()); assert.ok(s.requested.current >= heldBytes(), 'live < held'); },
  () => { held = held.filter(() => rand() < 0.7); },  // drop some
  () => pick([gp.Heap.prototype.array, gp.Heap.prototype.stats, gp.DeviceArray.prototype.sum]).call(pick(junk), 4),
  () => gp.open(pick([{policy: 'nope'}, {hard_limit: pick(junk)}, {backend: 'tape'}, {x: 1}, 5])).close(),
  () => new gp.DeviceArray(pick(junk)),
  // Past the limit with garbage awaiting V8: OOMs thrown while scavenges run finalizers.
  () => { for (let k = 0; k < 96; ++k) heap.array(65536); },
];

function call(f) {
  ++calls;
  try {
    f();
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    ++errors;
    const v8Check = e instanceof TypeError && /Illegal invocation|Cannot (convert|mix) a (Symbol|BigInt)/.test(e.message);
    if (!v8Check) {
      assert.ok(/^GCPRESSURE_ERR_[A-Z]+$/.test(e.code), `call ${calls}: no gcpressure code: ${e.stack}`);
      assert.ok(e.message.startsWith('gcpressure: '), `call ${calls}: ${e.message}`);
    }
  }
}

for (let i = 0; i < OPS; ++i) {
  call(pick(ops));
  if (!closed && i === Math.floor(OPS * 0.9)) {  // the last tenth: after close
    const bytes = heldBytes();
    held = held.filter((a) => a.isLive());
    call(() => { heap.collectFull(); heap.drain(); });  // the policy's full: gc()
    const s = JSON.parse(heap.stats());
    assert.strictEqual(s.requested.current, heldBytes(), 'after a full collection live != held');
    assert.strictEqual(bytes, heldBytes());
    assert.strictEqual(s.misuse_errors || 0, 0);
    for (const a of held) a.free();
    heap.close();
    closed = true;
  }
}
if (foreign.isLive()) foreign.free();
other.close();
console.log(`test_fuzz.js: ${calls} calls, ${errors} threw a gcpressure or V8 type error, none crashed; accounting exact`);
