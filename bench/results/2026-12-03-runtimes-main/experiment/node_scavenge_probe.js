// One V8 scavenge after N iterations of 8 dropped 256 KiB device arrays and 300 small objects,
// over a host heap of M MiB, timed 200 times: raw gc({type: 'minor'}) (no policy argument) or
// through the binding's heap.collectMinor() under POLICY (e.g. at_limit).
//   GCP_NODE_ADDON=build/release/examples/runtimes/node/gcpressure.node node node_scavenge_probe.js M N [POLICY]
const gp = require(require('path').join(__dirname, '../../../../examples/runtimes/node/gcpressure.js'));
const v8 = require('v8'); const gc = gp.gc();
const heap = gp.open({backend: 'host', policy: process.argv[4] || "none", hard_limit: '64MiB'});
let hh = null; const target = v8.getHeapStatistics().used_heap_size + (+process.argv[2]) * 2 ** 20;
for (let n = 0; v8.getHeapStatistics().used_heap_size < target;) for (let k = 0; k < 1000; ++k, ++n) hh = {next: hh, n};
const per = +process.argv[3];
const ts = [];
for (let i = 0; i < 200; ++i) {
  for (let j = 0; j < per; ++j) {
    for (let a = 0; a < 8; ++a) heap.array(65536).fill(0);
    const junk = []; for (let k = 0; k < 300; ++k) junk[k % 8] = {k, k1: k + 1};
  }
  const t = process.hrtime.bigint(); if (process.argv[4]) heap.collectMinor(); else gc({type: "minor", execution: "sync"}); ts.push(Number(process.hrtime.bigint() - t) / 1e6);
}
ts.sort((a, b) => a - b); console.log(process.argv[2], 'MiB host heap,', per, 'iterations of 8 arrays per scavenge: median', ts[100].toFixed(3), 'ms, p10', ts[20].toFixed(3), 'p90', ts[180].toFixed(3));
