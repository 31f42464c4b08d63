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

// e (null: accepted) must be the RangeError of row r: the C API's reason after the option's name, 'gcpressure' once.
function checkRefusal(what, e, r) {
  check(e !== null, `${what}: accepted`);
  if (e === null) return;
  check(e instanceof RangeError && e.code === 'GCPRESSURE_ERR_INVALID', `${what}: ${e.constructor.name} ${e.code}`);
  const got = reasonIn(e.message, r.name);
  check(got === r.reason, `${what}: got '${got}', the C API says '${r.reason}'`);
  const said = e.message.split('gcpressure').length - 1;
  check(said === 1, `${what}: 'gcpressure' said ${said} times in: ${e.message}`);
}

check(rows.length >= 20, `at least 20 bad values in ${path} (${rows.length})`);
for (const r of rows) {
  // An integer is also given as a JS number: the addon writes it in decimal,
  // so the options table sees the same text.
  const forms = [r.value];
  if (/^-?[0-9]+$/.test(r.value) && String(Number(r.value)) === r.value) forms.push(Number(r.value));
  for (const v of forms) {
    const what = `${r.name} = ${JSON.stringify(v)}`;
    checkRefusal(`${what} by gp.open`, openError(r.name, v), r);
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

// heap.setLimits takes the limits as gp.open does (Note [Limits as text],
// gcpressure_node.cc): each bad limit of the table is refused with the same
// text, and leaves the limits as they were.
function setLimitsError(h, soft, hard) {
  try {
    h.setLimits(soft, hard);
    return null;
  } catch (e) {
    return e;
  }
}
try {
  const h = gp.open({backend: 'host', collector: false, hard_limit: '64 MB', soft_limit: '32MiB', host_capacity: '1GiB'});
  const limits = () => { const s = JSON.parse(h.stats()); return [s.soft_limit, s.hard_limit]; };
  for (const r of rows.filter((x) => x.name === 'soft_limit' || x.name === 'hard_limit')) {
    const args = r.name === 'soft_limit' ? [r.value, undefined] : [undefined, r.value];
    const what = `setLimits(${args.map((a) => JSON.stringify(a)).join(', ')})`;
    checkRefusal(what, setLimitsError(h, ...args), r);
  }
  check(String(limits()) === String([32 * MiB, 64 * MiB]), `a refused limit changed one: ${limits()}`);
  // Good values: size strings, a percentage of the device (1 GiB), bytes, 0/null/undefined unchanged.
  const good = [
    [['16 MB', '32MiB'], [16 * MiB, 32 * MiB]],
    [[null, '50%'], [16 * MiB, 512 * MiB]],
    [[8 * MiB, 0], [8 * MiB, 512 * MiB]],
    [[undefined, 96 * MiB], [8 * MiB, 96 * MiB]],
    [[null, '25%'], [8 * MiB, 256 * MiB]],
    [[], [8 * MiB, 256 * MiB]],
  ];
  for (const [args, want] of good) {
    const e = setLimitsError(h, ...args);
    check(e === null && String(limits()) === String(want),
          `setLimits(${args.map((a) => JSON.stringify(a)).join(', ')}): ${e ? e.message : limits()}, want ${want}`);
  }
  // Refusals of other kinds: JS types, integers, N%avail, soft above hard, after close.
  const bad = [
    [[{}, undefined], TypeError, 'GCPRESSURE_ERR_INVALID', 'heap.setLimits: soft_limit must be a number or a string'],
    [[undefined, true], TypeError, 'GCPRESSURE_ERR_INVALID', 'heap.setLimits: hard_limit must be a number or a string'],
    [[-1, undefined], RangeError, 'GCPRESSURE_ERR_INVALID', 'heap.setLimits: soft_limit must be a non-negative integer'],
    [[undefined, 1.5], RangeError, 'GCPRESSURE_ERR_INVALID', 'heap.setLimits: hard_limit must be a non-negative integer'],
    [[undefined, '80%avail'], RangeError, 'GCPRESSURE_ERR_INVALID', "'80%avail' (N%avail follows the memory at run time"],
    [['1GiB', undefined], RangeError, 'GCPRESSURE_ERR_INVALID', 'soft limit above hard limit'],
    // The number 0 leaves a limit; the text '0' is the constructor's error.
    [['0', undefined], RangeError, 'GCPRESSURE_ERR_INVALID', "soft_limit: '0' (a size must be at least 1 byte)"],
  ];
  for (const [args, cls, code, text] of bad) {
    const e = setLimitsError(h, ...args);
    check(e instanceof cls && e.code === code && e.message.includes(text) && e.message.startsWith('gcpressure: '),
          `setLimits(${args.map((a) => JSON.stringify(a)).join(', ')}): ${e && e.constructor.name} ${e && e.message}`);
  }
  check(String(limits()) === String([8 * MiB, 256 * MiB]), `a refused call changed a limit: ${limits()}`);
  h.close();
  for (const args of [[8 * MiB, 0], ['16 MB', undefined], [undefined, '50%']]) {
    const e = setLimitsError(h, ...args);
    check(e instanceof Error && e.code === 'GCPRESSURE_ERR_SHUTDOWN',
          `setLimits(${args.map((a) => JSON.stringify(a)).join(', ')}) after close: ${e && e.code} ${e && e.message}`);
  }
} catch (e) {
  check(false, `setLimits: ${e.stack}`);
}

for (const f of failures) console.log(`FAIL ${f}`);
console.log(`${checks - failures.length} passed, ${failures.length} failed`);
process.exit(failures.length ? 1 : 0);
