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
  return new native.Heap(o, () => gc(MINOR), () => gc());
}

module.exports = {
  open,
  Heap: native.Heap,
  DeviceArray: native.DeviceArray,
  policyNames: native.policyNames,
  gc: v8Gc,
};
