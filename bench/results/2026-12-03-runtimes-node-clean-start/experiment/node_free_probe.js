const gp = require(process.env.W + '/examples/runtimes/node/gcpressure.js');
const h = gp.open({backend: 'host', policy: 'explicit_free', hard_limit: '64MiB'});
for (const n of [65536, 1024]) {
  let ta = 0n, tf = 0n;
  for (let i = 0; i < 2000; ++i) {
    const t0 = process.hrtime.bigint(); const a = h.array(n); const t1 = process.hrtime.bigint();
    a.free(); const t2 = process.hrtime.bigint(); ta += t1 - t0; tf += t2 - t1;
  }
  console.log(`${n * 4} B arrays: alloc ${Number(ta) / 2000 / 1e3} us, free ${Number(tf) / 2000 / 1e3} us`);
}
