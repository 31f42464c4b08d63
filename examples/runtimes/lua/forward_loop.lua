-- forward_loop.lua — the Flux-style forward loop of the C++ forward_loop
-- (bench/forward), in Lua 5.4.
--
-- `layers` Dense layers y = relu.(W*x .+ b): every layer allocates its matmul
-- output (the broadcast's temporary) and its own output as device arrays owned
-- by Lua's collector, and the loop just drops them, as Julia code does. A live
-- host heap of --host-heap-mib MiB of small linked Lua tables makes Lua's own
-- collector run rarely (its pace follows Lua bytes, not device bytes), and a
-- few hundred small tables per iteration stand for the rest of a program.
-- Device memory stays bounded only because gcpressure's policy asks Lua's
-- collector for collections when the device bytes justify one.
--
--   lua5.4 forward_loop.lua [--backend auto|host|cuda|cuda_async]
--     [--policy NAME|none]   (NAME: one of gcpressure_policy_names(), e.g. pressure)
--     [--workload steady|promote|burst|varied] [--iters N] [--layers N] [--d N] [--batch N]
--     [--host-heap-mib N] [--hard-limit SIZE] [--soft-limit SIZE] [--gc-mode generational|incremental]
--     [--promote-share X] [--burst-every N] [--burst-fraction X] [--seed N] [--no-sync]
--     [--trace FILE.csv] [--json] [--quiet] [--check] [--expect-oom] [--skip-without-backend]
--
-- --policy explicit_free is the oracle: the loop frees each array with
-- a:free() the moment it dies (no collection runs). --policy runtime_native
-- is Lua's own mechanism only: the module calls lua_gc(L, LUA_GCSTEP, KiB)
-- before each allocation, the library asks for no collection (lua_collector.c,
-- Note [Lua's own mechanism: LUA_GCSTEP by the allocation's KiB]). The workloads are those of
-- the C++ loop (bench/forward/workload.cpp, Note [The workloads]):
--   steady   every iteration allocates the same arrays and drops them all;
--   promote  as steady, and each array is also kept alive, with probability
--            --promote-share (0.25), for 1..50 iterations (uniform, fixed
--            seed), then dies at the start of the iteration its life ends;
--   burst    as steady, and the last iteration of every --burst-every (50)
--            allocates --burst-fraction (0.5) of the hard limit in chunks of
--            min(256 MiB, hard limit / 16), holds them at once, writes them,
--            then drops them;
--   varied   as steady, and each layer also allocates one side array of a
--            log-uniform size (fixed seed) from 4 KiB to min(256 MiB, hard
--            limit / 16), writes it and drops it at the end of the layer.
-- (Lua's math.random, not the C++ loop's mt19937_64: same distributions,
-- different draws.) Each iteration ends with the iteration hint, then
-- heap:synchronize() (the sync point: on CUDA the compute is queued on the
-- default stream; --no-sync leaves it out).
--
-- With --json the last line is one JSON object with the keys of the C++ loop's
-- summary (policy, workload, backend, iterations, ooms, peak_live_bytes,
-- peak_reserved_bytes, collections_minor, collections_full,
-- collections_full_steady, max_pause_seconds, gc_seconds, wall_seconds,
-- time_per_iter, finalized, and the library's every-collection counts where it
-- has them) and a few more. --check exits 1 unless the run had >= 200
-- iterations, allocated >= 20x the hard limit, had zero OOMs and kept peak
-- reserved within the hard limit. --policy none registers no collector: Lua's
-- collector alone, paced by Lua bytes; --expect-oom exits 1 unless that run
-- hit OOMs (the failure this library exists to prevent). Options left out
-- whose GCPRESSURE_* variable is set (backend, policy, hard and soft limit)
-- come from the environment.

local opts = {
  backend = "auto", policy = "pressure", workload = "steady", iters = 300, layers = 4, d = 64, batch = 1024,
  host_heap_mib = 32, hard_limit = "64MiB", soft_limit = nil, gc_mode = "generational",
  promote_share = 0.25, burst_every = 50, burst_fraction = 0.5, seed = 42,
  trace = nil, json = false, quiet = false, check = false, skip_without_backend = false, expect_oom = false,
  no_sync = false, no_clean_start = false,
}
local given = {}

local function usage(msg)
  io.stderr:write((msg and (msg .. "\n") or ""),
    "usage: lua5.4 forward_loop.lua [--backend B] [--policy P] [--workload steady|promote|burst|varied]\n",
    "       [--iters N] [--layers N] [--d N] [--batch N] [--host-heap-mib N] [--hard-limit SIZE]\n",
    "       [--soft-limit SIZE] [--gc-mode generational|incremental] [--promote-share X] [--burst-every N]\n",
    "       [--burst-fraction X] [--seed N] [--no-sync] [--no-clean-start] [--trace FILE.csv] [--json]\n",
    "       [--quiet] [--check] [--expect-oom] [--skip-without-backend]\n")
  os.exit(2)
end

do
  local flags = { json = true, quiet = true, check = true, ["skip-without-backend"] = true, ["expect-oom"] = true,
    ["no-sync"] = true, ["no-clean-start"] = true }
  local numbers = { iters = true, layers = true, d = true, batch = true, ["host-heap-mib"] = true,
    ["burst-every"] = true, seed = true }
  local reals = { ["promote-share"] = true, ["burst-fraction"] = true }
  local i = 1
  while i <= #arg do
    local name = arg[i]:match("^%-%-([%w%-]+)$")
    if not name then usage("unknown argument " .. arg[i]) end
    if name == "help" then usage() end
    local key = name:gsub("%-", "_")
    if flags[name] then
      opts[key] = true
      i = i + 1
    else
      local v = arg[i + 1]
      if v == nil or opts[key] == nil and key ~= "soft_limit" and key ~= "trace" then usage("bad option --" .. name) end
      if numbers[name] then
        v = math.tointeger(tonumber(v))
        if not v or v < 0 then usage("--" .. name .. " needs a non-negative integer") end
      elseif reals[name] then
        v = tonumber(v)
        if not v or v < 0 or v > 1 then usage("--" .. name .. " needs a number in [0, 1]") end
      end
      opts[key] = v
      given[key] = true
      i = i + 2
    end
  end
  if opts.iters < 1 or opts.layers < 1 or opts.d < 1 or opts.batch < 1 or opts.burst_every < 1 then
    usage("sizes must be positive")
  end
  local workloads = { steady = true, promote = true, burst = true, varied = true }
  if not workloads[opts.workload] then usage("--workload must be steady, promote, burst or varied") end
  -- The environment is the default layer: a flag left out whose variable is set is not passed.
  for key, var in pairs({ backend = "GCPRESSURE_BACKEND", policy = "GCPRESSURE_POLICY",
                          hard_limit = "GCPRESSURE_HARD_LIMIT", soft_limit = "GCPRESSURE_SOFT_LIMIT" }) do
    if not given[key] and os.getenv(var) then opts[key] = nil end
  end
end

local gcpressure = require "gcpressure"

local gcpressure = require "gcpressure"

-- A small JSON reader for the library's stats.
local function json_decode(s)
  local pos = 1
  local escapes = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local function str()
    local out, i = {}, pos + 1
    while true do
      local c = s:sub(i, i)
      if c == '"' then pos = i + 1; return table.concat(out) end
      if c == "" then error("JSON: unterminated string") end
      if c == "\\" then
        local n = s:sub(i + 1, i + 1)
        if n == "u" then out[#out + 1] = utf8.char(tonumber(s:sub(i + 2, i + 5), 16)); i = i + 6
        else out[#out + 1] = escapes[n] or n; i = i + 2 end
      else
        out[#out + 1] = c; i = i + 1
      end
    end
  end
  local value
  local function seq(close, item)
    pos = pos + 1
    ws()
    if s:sub(pos, pos) == close then pos = pos + 1; return end
    while true do
      item()
      ws()
      local c = s:sub(pos, pos)
      pos = pos + 1
      if c == close then return end
      if c ~= "," then error("JSON: expected , or " .. close .. " at " .. pos) end
    end
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local t = {}
      seq("}", function()
        ws()
        local k = str()
        ws()
        if s:sub(pos, pos) ~= ":" then error("JSON: expected : at " .. pos) end
        pos = pos + 1
        t[k] = value()
      end)
      return t
    elseif c == "[" then
      local t = {}
      seq("]", function() t[#t + 1] = value() end)
      return t
    elseif c == '"' then
      return str()
    end
    for word, v in pairs({ ["true"] = true, ["false"] = false }) do
      if s:sub(pos, pos + #word - 1) == word then pos = pos + #word; return v end
    end
    if s:sub(pos, pos + 3) == "null" then pos = pos + 4; return nil end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if not num then error("JSON: unexpected character at " .. pos) end
    pos = pos + #num
    return tonumber(num)
  end
  return value()
end

local function fmt_bytes(n)
  local units = { "B", "KiB", "MiB", "GiB", "TiB" }
  local u = 1
  while n >= 1024 and u < #units do n = n / 1024; u = u + 1 end
  return string.format(u == 1 and "%d %s" or "%.2f %s", n, units[u])
end

-- The heap. --policy none: no collector (Lua's own pace only).

-- The heap. --policy none: no collector (Lua's own pace only).
local ok, heap = pcall(gcpressure.new, {
  backend = opts.backend,
  policy = opts.policy ~= "none" and opts.policy or nil,
  collector = opts.policy ~= "none",
  hard_limit = opts.hard_limit,
  soft_limit = opts.soft_limit,
  gc_mode = opts.gc_mode,
})
if not ok then
  if opts.skip_without_backend and (type(heap) == "table" and heap.kind == "unsupported"
                                    or tostring(heap):find("needs the module built", 1, true)) then
    print("skipped: " .. tostring(heap))
    os.exit(77)
  end
  io.stderr:write(tostring(heap), "\n")
  os.exit(2)
end
local info = heap:info()
local oracle = info.policy == "explicit_free"
local d, batch, layers = opts.d, opts.batch, opts.layers
local hard_limit = json_decode(heap:stats()).hard_limit

-- The model: weights and biases live for the whole run.
local W, B = {}, {}
for l = 1, layers do
  W[l] = heap:array(d * d):fill_random(l, 1 / math.sqrt(d))
  B[l] = heap:array(d):fill(0.01)
end
local input = heap:array(d * batch):fill_random(0, 1)

-- The simulated runtime's live host heap: linked small tables.
local host_heap
do
  local target = collectgarbage("count") + opts.host_heap_mib * 1024
  local n = 0
  while collectgarbage("count") < target do
    for _ = 1, 1000 do
      host_heap = { next = host_heap, n = n }
      n = n + 1
    end
  end
end

-- Note [A clean start]
-- As in the C++ loop (bench/forward/loop.cpp: GC_gcollect before the device
-- heap, "the host heap's first marking is not this run's work"), the set-up's
-- collections run before the loop: one full collection, then two young
-- steps. In Lua 5.4's generational mode the first two young steps after the
-- host heap was built cost ~12 ms each with this 32 MiB heap, whether or not
-- a full collection ran first (Lua 5.4.4, measured 2026-12-03; later steps
-- 0.02-1 ms). Left in the loop, they were its first collections: under
-- pressure they were the cost model's first samples (19 and 14 ms), so the
-- next two minors waited for 10 MiB of young (6x the oracle's peak on
-- steady, against 2 MiB young at every later sync); under runtime_native
-- (LUA_GCSTEP by the allocation's KiB) Lua ran out at iteration 9 in every
-- run of steady. They go through collectgarbage, not the heap: the policy
-- does not see them. --no-clean-start leaves them in the loop (the control).
if not opts.no_clean_start then
  collectgarbage("collect")
  collectgarbage("step", 0)
  collectgarbage("step", 0)
end

-- Arrays and the oracle. kept: arrays a workload holds past their death in
-- the layer chain (weak keys: the ring below is what keeps them alive).
local kept = setmetatable({}, { __mode = "k" })
-- Under the oracle, this iteration's arrays, so that what an OOM left behind
-- is freed too (only then: a list would keep them reachable for the collector).
local inflight = {}
local explicit_frees = 0
local function died(a)
  if oracle and a and not kept[a] and a:is_live() then
    a:free()
    explicit_frees = explicit_frees + 1
  end
end
local function track(a)
  if oracle then inflight[#inflight + 1] = a end
  return a
end
local function new_array(n) return track(heap:array(n)) end

-- The workloads (the header's definitions; bench/forward/workload.cpp).
math.randomseed(opts.seed)
local chunk_cap = math.max(4096, math.min(256 * 1024 * 1024, hard_limit // 16))
local workload = {}
if opts.workload == "promote" then
  local ring = {} -- array -> the iteration at whose start it dies
  function workload.begin_iteration(it)
    for a, expiry in pairs(ring) do
      if expiry <= it then
        ring[a] = nil
        kept[a] = nil
        died(a)
      end
    end
  end
  function workload.after_layer(it, t, y)
    for _, a in ipairs({ t, y }) do
      if math.random() < opts.promote_share then
        ring[a] = it + math.random(1, 50)
        kept[a] = true
      end
    end
  end
elseif opts.workload == "burst" then
  local total = math.floor(opts.burst_fraction * hard_limit)
  function workload.end_iteration(it)
    if (it + 1) % opts.burst_every ~= 0 or total == 0 then return end
    local held = {}
    for got = 0, total - 1, chunk_cap do
      held[#held + 1] = new_array(math.max(1, math.min(chunk_cap, total - got) // 4)):fill(0)
    end
    for _, a in ipairs(held) do died(a) end
  end
elseif opts.workload == "varied" then
  local lo, hi = math.log(4096), math.log(chunk_cap)
  function workload.after_layer()
    local bytes = math.floor(math.exp(lo + (hi - lo) * math.random())) & ~3
    died(new_array(math.max(1, bytes // 4)):fill(0))
  end
end

local function forward(it, x)
  for l = 1, layers do
    local t = track(heap:matmul(W[l], x, d, d, batch)) -- W*x: the broadcast's temporary
    local y = track(heap:bias_relu(t, B[l], d, batch)) -- relu.(t .+ b): the layer's output
    if workload.after_layer then workload.after_layer(it, t, y) end
    died(t)
    if x ~= input then died(x) end
    x = y
  end
  local junk = {}
  for k = 1, 300 do junk[k % 8 + 1] = { k, k + 1 } end -- small host garbage
  return x
end

local function is_oom(err) return type(err) == "table" and err.kind == "out_of_memory" end

local trace = opts.trace and assert(io.open(opts.trace, "w"))
if trace then trace:write("iteration,live_bytes,reserved_bytes,collections_minor,collections_full,gc_seconds\n") end

-- Blocking whole-heap collections of any origin so far: the policy's blocking
-- fulls and back-to-back cycles, and Lua's own whole-heap cycles (a lower
-- bound in generational mode: lua_collector.c).
local function blocking_any(st)
  return st.gc.by_kind.blocking_full + (st.gc.blocking_cycles or 0) + (st.gc.runtime_full_collections or 0)
end

local ooms, first_oom, steady_base, steady_any, checksum = 0, nil, 0, 0, 0
local steady_at = opts.iters // 10
local t0 = gcpressure.now()
for it = 0, opts.iters - 1 do
  local fine, err = pcall(function()
    if workload.begin_iteration then workload.begin_iteration(it) end
    local y = forward(it, input)
    if it == opts.iters - 1 and not info.on_device then checksum = y:sum() end
    died(y)
    if workload.end_iteration then workload.end_iteration(it) end
  end)
  if not fine then
    if not is_oom(err) then error(err, 0) end
    ooms = ooms + 1
    first_oom = first_oom or it
    if not opts.quiet then io.stderr:write("iteration ", it, ": ", tostring(err), "\n") end
  end
  for _, a in ipairs(inflight) do died(a) end -- the oracle: what an OOM left behind
  inflight = {}
  heap:iteration()
  if not opts.no_sync then heap:synchronize() end
  if it + 1 == steady_at then
    local st = json_decode(heap:stats())
    steady_base, steady_any = st.gc.by_kind.blocking_full, blocking_any(st)
  end
  if trace or not opts.quiet then
    local s = json_decode(heap:stats())
    local k = s.gc.by_kind
    if trace then
      trace:write(string.format("%d,%d,%d,%d,%d,%.6f\n", it + 1, s.requested.current, s.reserved.current, k.minor,
        k.incremental_full + k.blocking_full, s.gc.gc_seconds))
    end
    if not opts.quiet then
      print(string.format("iteration %4d: live %10s, reserved %10s, collections: minor %d, full %d", it + 1,
        fmt_bytes(s.requested.current), fmt_bytes(s.reserved.current), k.minor, k.incremental_full + k.blocking_full))
    end
  end
end
local wall = gcpressure.now() - t0
if trace then trace:close() end

local s = json_decode(heap:stats())
local k = s.gc.by_kind
local g = s.gc
info = heap:info()
local summary = {
  { "policy", g.policy ~= "" and g.policy or info.policy },
  { "workload", opts.workload },
  { "backend", s.backend },
  { "iterations", opts.iters },
  { "ooms", ooms }, { "first_oom_iteration", first_oom },
  { "peak_live_bytes", s.requested.peak },
  { "peak_reserved_bytes", s.reserved.peak },
  { "collections_minor", k.minor },
  { "collections_full", k.incremental_full + k.blocking_full },
  -- As the C++ loop: blocking whole-heap collections of any origin after the first 10%.
  { "collections_full_steady", blocking_any(s) - steady_any },
  { "collections_full_steady_any", blocking_any(s) - steady_any },
  { "collections_full_steady_policy", k.blocking_full - steady_base },
  { "max_pause_seconds", g.longest_pause_seconds },
  { "gc_seconds", g.gc_seconds },
  { "wall_seconds", wall },
  { "time_per_iter", wall / opts.iters },
  { "finalized", g.finalized },
  { "explicit_frees", explicit_frees },
  -- Every collection, whoever started it (the library's view; absent keys: an older library).
  { "collections_runtime", g.runtime_collections },
  { "exposed_gc_seconds", g.exposed_gc_seconds },
  { "gc_seconds_all", g.gc_seconds_all },
  -- Lua's own cycles (Note [Counting Lua's own collections] in lua_collector.c: exact
  -- in generational mode, whole-heap ones a lower bound there; no seconds).
  { "lua_collections", info.lua_collections },
  { "lua_full_collections", info.lua_full_collections },
  { "runtime", "lua" },
  { "lua_version", _VERSION },
  { "gc_mode", info.gc_mode },
  { "synchronize", not opts.no_sync }, { "clean_start", not opts.no_clean_start },
  { "hard_limit_bytes", s.hard_limit },
  { "soft_limit_bytes", s.soft_limit },
  { "total_allocated_bytes", s.requested.total },
  { "incremental_slices", g.incremental_slices },
  { "library_ooms", s.ooms },
  { "layers", layers }, { "d", d }, { "batch", batch }, { "host_heap_mib", opts.host_heap_mib },
  { "seed", opts.seed },
  { "lua_heap_kib", math.floor(collectgarbage("count")) },
  { "checksum", checksum },
  -- Which figures are bounds, and why (the C++ loop's "bounds" object).
  { "bounds", { raw = '{"collections_runtime":"Lua\'s own cycles, counted by __gc sentinels: exact in '
    .. 'generational mode, counted a few steps late in incremental mode","runtime_full_collections":"generational '
    .. 'mode: a lower bound (an old sentinel; majors while it ages are missed); incremental mode: every cycle",'
    .. '"runtime_gc_seconds":"unknown (0): Lua\'s own collections cannot be timed","exposed_gc_seconds":"the '
    .. 'policy\'s part only (measured where the backend times its events, else an upper bound); Lua\'s own time is unknown","collections_full_steady":"the policy\'s '
    .. 'parts exact; Lua\'s own whole-heap cycles as above, counted as blocking"}' } },
}

if opts.json then
  local parts = {}
  for _, kv in ipairs(summary) do
    local v = kv[2]
    if v == nil then v = "null"
    elseif type(v) == "table" then v = v.raw
    elseif type(v) == "boolean" then v = tostring(v)
    elseif type(v) == "string" then v = string.format("%q", v)
    elseif math.type(v) == "integer" then v = string.format("%d", v)
    else v = string.format("%.9g", v) end
    parts[#parts + 1] = string.format("%q:%s", kv[1], v)
  end
  print("{" .. table.concat(parts, ",") .. "}")
else
  print(string.format("%s policy, %s workload, %s backend, Lua %s GC: %d iterations in %.2f s", summary[1][2],
    opts.workload, s.backend, info.gc_mode, opts.iters, wall))
  print(string.format("  peak reserved %s (hard limit %s), peak live %s, allocated %s in all",
    fmt_bytes(s.reserved.peak), fmt_bytes(s.hard_limit), fmt_bytes(s.requested.peak), fmt_bytes(s.requested.total)))
  print(string.format("  collections: minor %d, whole-heap %d (blocking after warm-up, any origin %d); gc %.3f s, longest pause %.2f ms",
    k.minor, k.incremental_full + k.blocking_full, blocking_any(s) - steady_any, s.gc.gc_seconds,
    s.gc.longest_pause_seconds * 1e3))
  print(string.format("  finalized %d arrays, OOMs %d", s.gc.finalized, ooms))
end

if opts.expect_oom then
  if ooms == 0 then
    io.stderr:write("forward_loop.lua: CHECK FAILED: expected OOMs without device pressure, got none\n")
    os.exit(1)
  end
  io.stderr:write(string.format("forward_loop.lua: as expected, %d of %d iterations hit OOM (peak reserved %s)\n",
    ooms, opts.iters, fmt_bytes(s.reserved.peak)))
elseif opts.check then
  local errs = {}
  if opts.iters < 200 then errs[#errs + 1] = "fewer than 200 iterations" end
  if s.requested.total < 20 * s.hard_limit then
    errs[#errs + 1] = string.format("allocated %s, less than 20x the hard limit %s", fmt_bytes(s.requested.total),
      fmt_bytes(s.hard_limit))
  end
  if ooms ~= 0 or s.ooms ~= 0 then errs[#errs + 1] = string.format("%d OOMs (library: %d)", ooms, s.ooms) end
  if s.reserved.peak > s.hard_limit then
    errs[#errs + 1] = string.format("peak reserved %s above the hard limit %s", fmt_bytes(s.reserved.peak),
      fmt_bytes(s.hard_limit))
  end
  if checksum ~= checksum then errs[#errs + 1] = "checksum is NaN" end
  if #errs > 0 then
    io.stderr:write("forward_loop.lua: CHECK FAILED: ", table.concat(errs, "; "), "\n")
    os.exit(1)
  end
  io.stderr:write(string.format("forward_loop.lua: check passed: peak reserved %s <= hard limit %s, %.1fx the limit allocated, 0 OOMs\n",
    fmt_bytes(s.reserved.peak), fmt_bytes(s.hard_limit), s.requested.total / s.hard_limit))
end
