'use strict';
// gcpressure.js — the Node.js face of gcpressure (the addon gcpressure.node).
//
//   const gp = require('./gcpressure.js');
//   const heap = gp.open({backend: 'host', hard_limit: '64MiB', policy: 'pressure'});
//   const a = heap.array(1024);    // a DeviceArray; dropping it returns its block
//   a.free();                      // or free it now (the oracle does)
//
// The addon is found at $GCP_NODE_ADDON, else next to this file.
// Policies: gp.policyNames() (the library's one list), plus 'none' (no
// collector: V8 alone). 'runtime_native' is V8's own mechanism only:
// napi_adjust_external_memory on every alloc and free, no collections asked
// for by the library (README.md, "The runtime's own mechanism").
const path = require('path');
const v8 = require('v8');
const vm = require('vm');

const native = require(process.env.GCP_NODE_ADDON || path.join(__dirname, 'gcpressure.node'));

// Note [Failures are returned; JS throws them] (gcpressure_node.cc): an addon
// function that fails returns its Error (nothing else it returns is one) and
// these wrappers throw it here, in JS: a throw from native code would leave
// Node's pending napi exception set while V8 may run the arrays' finalizers
// inside a collection, which Node turns into a fatal "uncaught" report.
function throwing(f) {
  return function (...args) {
    const r = f.apply(this, args);
    if (r instanceof Error) throw r;
    return r;
  };
}
for (const cls of [native.Heap, native.DeviceArray]) {
  for (const [name, d] of Object.entries(Object.getOwnPropertyDescriptors(cls.prototype))) {
    if (name === 'constructor') continue;
    if (typeof d.value === 'function') d.value = throwing(d.value);
    if (d.get) d.get = throwing(d.get);
    Object.defineProperty(cls.prototype, name, d);
  }
  Object.freeze(cls.prototype);  // as read-only as the addon's own (napi_default) were
}
const constructing = (cls) => new Proxy(cls, {
  construct(target, args) {
    const r = Reflect.construct(target, args);
    if (r instanceof Error) throw r;
    return r;
  },
});
const Heap = constructing(native.Heap);
const DeviceArray = constructing(native.DeviceArray);

// Note [V8 as the collector] (gcpressure_node.cc): the --expose-gc function.
// `node --expose-gc` defines it globally; otherwise the flag is set at run
// time and the function taken from a fresh context (the flag is read when a
// context is created), leaving this program's global object as it was.
let gcFn = null;
function v8Gc() {
  if (gcFn) return gcFn;
  if (typeof globalThis.gc === 'function') {
    gcFn = globalThis.gc;
  } else {
    v8.setFlagsFromString('--expose-gc');
    gcFn = vm.runInNewContext('gc');
  }
  return gcFn;
}

// full: gc() with no argument, V8's forced full collection, which also runs
// the weak (finalizer) callbacks before it returns. gc({type: 'major'}) is
// not enough: measured in test_fuzz.js (3 seeds), it left 2.4-8.6 MB of
// dead arrays unreleased that a following gc() released (their finalizers
// were left for a later task). minor: a scavenge, whose finalizers run
// before it returns (test_module.js checks both).
const MINOR = {type: 'minor', execution: 'sync'};

function open(options = {}) {
  if (options === null || typeof options !== 'object') {
    const e = new TypeError('gcpressure: open(options): options must be an object');
    e.code = 'GCPRESSURE_ERR_INVALID';
    throw e;
  }
  const o = Object.assign({}, options);
  if (o.policy === 'none') {
    delete o.policy;
    o.collector = false;
  }
  const gc = v8Gc();
  return new Heap(o, () => gc(MINOR), () => gc());
}

module.exports = {
  open,
  Heap,
  DeviceArray,
  policyNames: native.policyNames,
  gc: v8Gc,
};
