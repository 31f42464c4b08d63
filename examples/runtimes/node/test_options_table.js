'use strict';
// test_options_table.js — one behaviour per input, from Node (ctest
// node_options_table): every bad value of tests/bad_options.txt given to
// gp.open({...}) must fail with the C API's message after the option's name
// (Note [One error per bad value], core/src/config_detail.hpp; Note [Every
// option of the table], gcpressure_node.cc). The expected texts are the C
// API's own, written at build time by examples/runtimes/bad_options_reasons.c
// into $GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED. Exit 1 on any failure.
const fs = require('fs');
const gp = require('./gcpressure.js');

const path = process.env.GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED;
if (!path) throw new Error('GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED is not set (ctest sets it)');
const rows = fs.readFileSync(path, 'utf8').split('\n').filter((l) => l).map((l) => {
  const m = /^([^\t]+)\t([^\t]*)\t(.+)$/.exec(l);
  if (!m) throw new Error(`${path}: malformed line: ${l}`);
  return {name: m[1], value: m[2], reason: m[3]};
});

let checks = 0;
const failures = [];
function check(cond, what) {
  ++checks;
  if (!cond) failures.push(what);
}

// The text after "invalid value for NAME: " in msg, or why there is none.
function reasonIn(msg, name) {
  const key = `invalid value for ${name}: `;
  const at = msg.indexOf(key);
  return at < 0 ? `<no '${key}' in: ${msg}>` : msg.slice(at + key.length);
}

// gp.open with option name = value (and the host backend unless the row is
// the backend's): the Error, or null when the value was accepted.
function openError(name, value) {
  try {
    gp.open({backend: 'host', collector: false, [name]: value}).close();
    return null;
  } catch (e) {
    return e;
  }
}

check(rows.length >= 20, `at least 20 bad values in ${path} (${rows.length})`);
for (const r of rows) {
  // An integer is also given as a JS number: the addon writes it in decimal,
  // so the options table sees the same text.
  const forms = [r.value];
  if (/^-?[0-9]+$/.test(r.value) && String(Number(r.value)) === r.value) forms.push(Number(r.value));
  for (const v of forms) {
    const what = `${r.name} = ${JSON.stringify(v)}`;
    const e = openError(r.name, v);
    check(e !== null, `${what}: accepted by gp.open`);
    if (e === null) continue;
    check(e instanceof RangeError && e.code === 'GCPRESSURE_ERR_INVALID', `${what}: ${e.constructor.name} ${e.code}`);
    const got = reasonIn(e.message, r.name);
    check(got === r.reason, `${what}: got '${got}', the C API says '${r.reason}'`);
    const said = e.message.split('gcpressure').length - 1;
    check(said === 1, `${what}: 'gcpressure' said ${said} times in: ${e.message}`);
  }
}

// Every key of the table is taken, in JS's own types, as the C API reads its text.
const MiB = 2 ** 20;
try {
  const h = gp.open({backend: 'host', hard_limit: 16 * MiB, soft_limit: '8 MB', gc_budget: 0.1, every_n: 2,
                     pool: false, verbose: false, async_release_threshold: 0, host_capacity: '1GiB', device: 0});
  const s = JSON.parse(h.stats());
  check(s.hard_limit === 16 * MiB && s.soft_limit === 8 * MiB, `limits from 16 MiB and "8 MB": ${s.hard_limit} ${s.soft_limit}`);
  h.close();
} catch (e) {
  check(false, `good values of every kind refused: ${e.message}`);
}

for (const f of failures) console.log(`FAIL ${f}`);
console.log(`${checks - failures.length} passed, ${failures.length} failed`);
process.exit(failures.length ? 1 : 0);
