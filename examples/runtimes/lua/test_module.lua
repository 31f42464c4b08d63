-- test_module.lua — the `gcpressure` Lua module: API, errors, finalizers,
-- re-entrancy from __gc, coroutines. Prints "N passed, M failed" last.
local gcpressure = require "gcpressure"

local passed, failed = 0, 0
local function check(cond, what)
  if cond then passed = passed + 1
  else
    failed = failed + 1
    io.stderr:write("FAIL: ", what, "\n", debug.traceback(), "\n")
  end
end
local function raises(fn, needle, what)
  local ok, err = pcall(fn)
  check(not ok and tostring(err):find(needle, 1, true) ~= nil,
    what .. " (expected an error with '" .. needle .. "', got " .. tostring(ok and "no error" or err) .. ")")
  return err
end
local function count(json, key) return tonumber(json:match('"' .. key .. '":(%-?%d+)')) end

check(type(gcpressure.version()) == "string", "version")
check(type(gcpressure.now()) == "number", "now")
check(gcpressure._VERSION:find("gcpressure", 1, true), "_VERSION")

-- options and their errors
raises(function() gcpressure.new{ backend = "quantum" } end, "expected auto, host, cuda", "bad backend")
raises(function() gcpressure.new{ gc_mode = "psychic" } end, "gc_mode must be", "bad gc_mode")
local perr = raises(function() gcpressure.new{ backend = "host", policy = "bogus" } end, "'bogus'", "bad policy")
check(type(perr) == "table" and perr.kind == "invalid", "bad policy: error kind invalid")
raises(function() gcpressure.new{ backend = "host", hard_limt = "8MiB" } end, "unknown option 'hard_limt'",
  "misspelt option key")
raises(function() gcpressure.new{ backend = "host", [1] = "x" } end, "option keys must be strings", "array-part option")
raises(function() gcpressure.new{ backend = "host", hard_limit = "lots" } end, "lots", "bad hard limit")
raises(function() gcpressure.new{ backend = "host", hard_limit = {} } end, "must be a number of bytes", "bad size type")
do -- CUDA where there is none: unsupported (only asserted without a GPU)
  local ok, err = pcall(gcpressure.new, { backend = "cuda" })
  if not ok then
    check(type(err) == "table" and err.kind == "unsupported" or tostring(err):find("needs the module built", 1, true),
      "cuda without a GPU: " .. tostring(err))
  end
end

local heap = gcpressure.new{ backend = "host", hard_limit = 16 * 1024 * 1024, policy = "at_limit" }
check(tostring(heap):find("host", 1, true), "heap tostring")
local info = heap:info()
check(info.backend == "host" and info.policy == "at_limit" and info.gc_mode == "generational", "info")
check(collectgarbage("isrunning"), "Lua GC running")

-- arrays
local a = heap:array(1000)
check(#a == 1000 and a:bytes() == 4000 and a:is_live(), "array length and bytes")
check(tostring(a):find("1000 floats", 1, true), "array tostring")
a:fill(2.5)
check(a:get(1) == 2.5 and a:get(1000) == 2.5, "fill/get")
a:set(7, -1)
check(a:get(7) == -1, "set")
check(math.abs(a:sum() - (999 * 2.5 - 1)) < 1e-3, "sum")
raises(function() a:get(0) end, "index out of range", "index 0")
raises(function() a:get(1001) end, "index out of range", "index past the end")
raises(function() heap:array(0) end, "length must be positive", "zero-length array")
raises(function() heap:array(-3) end, "length must be positive", "negative length")
raises(function() heap:array(2^60) end, "too large", "heap:array(2^60)")
raises(function() heap:array(2^70) end, "too large", "heap:array(2^70) (no integer representation)")
raises(function() heap:array(1.5) end, "must be an integer", "fractional length")
raises(function() heap:alloc(2^60) end, "too large", "heap:alloc(2^60)")
raises(function() heap:alloc(0) end, "size must be positive", "zero-byte alloc")
local live = heap:usage()
check(live == 4000, "usage after one array: " .. live)
a:free()
check(not a:is_live() and #a == 0, "freed array")
raises(function() a:get(1) end, "used after free", "get after free")
raises(function() a:free() end, "freed twice", "double free")
check(heap:usage() == 0, "usage after free")
local raw = heap:alloc(4096 + 3)
check(#raw == 1024 and raw:bytes() == 4099, "alloc(bytes)")
raw = nil

-- small compute: W (2x3) * X (3x2), then relu(. + b)
local W = heap:array(6); for i, v in ipairs{ 1, 2, 3, 4, 5, 6 } do W:set(i, v) end
local X = heap:array(6); for i, v in ipairs{ 1, -1, 0, 1, -2, 0 } do X:set(i, v) end
local Y = heap:matmul(W, X, 2, 3, 2)
check(Y:get(1) == -5 and Y:get(2) == 1 and Y:get(3) == -8 and Y:get(4) == 1, "matmul")
local b = heap:array(2); b:set(1, 1); b:set(2, 10)
local R = heap:bias_relu(Y, b, 2, 2)
check(R:get(1) == 0 and R:get(2) == 2 and R:get(3) == 2 and R:get(4) == 11, "bias_relu")
raises(function() heap:matmul(W, X, 3, 3, 2) end, "smaller", "matmul size check")
W, X, Y, b, R = nil, nil, nil, nil, nil

-- garbage: __gc queues the block; drain (or the next allocation) returns it
collectgarbage("stop")
do local g = heap:array(256 * 1024) end
collectgarbage("collect")
local s = heap:stats()
check(count(s, "deferred_pending") >= 1, "queued by __gc")
heap:drain()
check(heap:usage() == 0, "drained")
collectgarbage("restart")

-- explicit collections through the callbacks
local before = heap:info()
heap:collect()
heap:collect(true)
local after = heap:info()
check(after.minor_calls == before.minor_calls + 1 and after.full_calls == before.full_calls + 1, "collect -> callbacks")
s = heap:stats()
check(count(s, "user") == 2 and count(s, "minor") >= 1 and count(s, "blocking_full") >= 1, "collections recorded")

-- device pressure drives Lua's collector: 256 MiB of garbage through 16 MiB
local host_live = {}
for i = 1, 20000 do host_live[i] = { i } end -- Lua's own collector now runs rarely
for i = 1, 256 do local g = heap:array(256 * 1024) end
s = heap:stats()
check(count(s, "ooms") == 0, "no OOM under pressure")
check(heap:info().minor_calls > after.minor_calls, "minor collections ran")
check(count(s:match('"reserved":{[^}]*}'), "peak") <= 16 * 1024 * 1024, "peak reserved within the limit")

-- re-entrancy from __gc: collections refused (BUSY), allocation allowed
local seen = {}
collectgarbage("stop")
do
  setmetatable({}, { __gc = function()
    local ok, err = pcall(heap.collect, heap)
    seen.collect_ok, seen.collect_err = ok, err
    local ok2, arr = pcall(heap.array, heap, 16)
    seen.alloc_ok = ok2 and arr:is_live()
  end })
end
heap:collect() -- our minor: lua_gc(LUA_GCSTEP) runs the __gc above inside the collection
collectgarbage("restart")
check(seen.collect_ok == false and tostring(seen.collect_err):find("inside a collection", 1, true),
  "heap:collect from __gc inside a collection: " .. tostring(seen.collect_err))
check(seen.alloc_ok == true, "heap:array from __gc inside a collection")
check(heap:info().gc_errors == 0, "no failed lua_gc calls")

-- allocation from a coroutine: the callbacks run on that thread
local co = coroutine.wrap(function()
  for i = 1, 128 do local g = heap:array(256 * 1024); if i % 16 == 0 then coroutine.yield(i) end end
  return "done"
end)
local r
repeat r = co() until r == "done"
check(count(heap:stats(), "ooms") == 0, "coroutine allocations")

-- OOM without a collector: the library's report
local bare = gcpressure.new{ backend = "host", hard_limit = "4MiB", collector = false }
check(bare:info().policy == "none", "no collector")
local keep = {}
local err = raises(function() for i = 1, 100 do keep[i] = bare:array(256 * 1024) end end, "out of memory", "OOM")
check(tostring(err):find("hard limit", 1, true), "OOM report mentions the hard limit")
-- Note [Lua error values]: a value to test, not only a message to match
check(type(err) == "table" and err.kind == "out_of_memory", "OOM error kind: " .. tostring(type(err) == "table" and err.kind))
check(getmetatable(err) and tostring(err) == err.message and err.message:find("out of memory", 1, true),
  "tostring(OOM error) is its message")
check(type(err) == "table" and type(err.status) == "string", "OOM error status")
raises(function() bare:collect() end, "no collector", "collect without a collector")
keep = nil

-- set_limits
heap:set_limits(0, 32 * 1024 * 1024)
check(count(heap:stats(), "hard_limit") == 32 * 1024 * 1024, "set_limits")
raises(function() heap:set_limits(64 * 1024 * 1024, 0) end, "soft limit above hard limit", "soft > hard")
-- size strings, read as gcpressure.new reads its limits
heap:set_limits("16 MB", "32MiB")
check(count(heap:stats(), "soft_limit") == 16 * 1024 * 1024, "set_limits('16 MB')")
local total = count(heap:stats(), "device_total")
heap:set_limits(nil, "50%")
check(count(heap:stats(), "hard_limit") == total // 2, "set_limits(nil, '50%') of " .. tostring(total))
heap:set_limits(0, 32 * 1024 * 1024)
raises(function() heap:set_limits("64 MBx") end, "invalid value for size: '64 MBx' (unknown unit", "bad size string")

-- incremental mode (a property of the whole Lua state)
local inc = gcpressure.new{ backend = "host", hard_limit = "16MiB", gc_mode = "incremental", step_kb = 256 }
check(inc:info().gc_mode == "incremental", "incremental mode")
do -- Lua's own cycles in incremental mode: every one is whole-heap
  collectgarbage("stop")
  local i0 = inc:info()
  collectgarbage("collect")
  local i1 = inc:info()
  collectgarbage("restart")
  check(i1.lua_collections == i0.lua_collections + 1 and i1.lua_full_collections == i0.lua_full_collections + 1,
    "incremental: a collection of Lua's own counts once, as whole-heap: " .. i0.lua_full_collections .. " -> "
    .. i1.lua_full_collections)
end
for i = 1, 256 do local g = inc:array(256 * 1024) end
check(count(inc:stats(), "ooms") == 0, "no OOM in incremental mode")
inc:close()
raises(function() inc:array(1) end, "closed", "use after close")
inc:close() -- idempotent

-- close with a live array: the array is unusable, its later __gc harmless
local h2 = gcpressure.new{ backend = "host", hard_limit = "8MiB" }
local orphan = h2:array(1024)
h2:close()
raises(function() orphan:get(1) end, "heap was closed", "array after its heap closed")
orphan = nil
do local h3 <close> = gcpressure.new{ backend = "host", hard_limit = "8MiB" }; h3:array(4) end -- __close
collectgarbage("collect")

-- the sync hint and quiet_moment(will_block) (issue 11)
do
  local hs = gcpressure.new{ backend = "host", hard_limit = "16MiB" }
  local before = count(hs:stats(), "syncs") or 0
  for i = 1, 64 do
    local g = hs:array(64 * 1024)
    hs:iteration()
    hs:synchronize()
    if i % 8 == 0 then hs:quiet_moment(true) end
    hs:quiet_moment()
  end
  hs:synchronize(nil)
  raises(function() hs:synchronize("stream") end, "number expected", "synchronize: bad stream")
  local s2 = hs:stats()
  check(count(s2, "ooms") == 0, "synchronize: no OOM")
  check(count(s2, "syncs") == nil or count(s2, "syncs") >= before + 65, "synchronize counted by the policy")
  -- from a __gc (inside a collection): refused, as every hint is
  local seen_sync
  collectgarbage("stop")
  do setmetatable({}, { __gc = function() seen_sync = select(2, pcall(hs.synchronize, hs)) end }) end
  hs:collect()
  collectgarbage("restart")
  check(type(seen_sync) == "table" and seen_sync.kind == "busy", "synchronize inside a collection: busy")
  hs:close()
  raises(function() hs:synchronize() end, "closed", "synchronize after close")
end

-- Lua's own collections, counted by sentinels (Note [Counting Lua's own collections])
do
  collectgarbage("stop") -- no automatic collection in between: every cycle below is one we made
  local hc = gcpressure.new{ backend = "host", hard_limit = "16MiB" } -- generational
  local i0 = hc:info()
  collectgarbage("step") -- one young collection in generational mode
  local i1 = hc:info()
  check(i1.lua_collections == i0.lua_collections + 1, "a young collection of Lua's own counts once: "
    .. i0.lua_collections .. " -> " .. i1.lua_collections)
  hc:collect()          -- the policy's: not Lua's own
  hc:collect(true)
  local i2 = hc:info()
  check(i2.lua_collections == i1.lua_collections, "collections the policy asked for are not Lua's own")
  check(i2.lua_cycles_all >= i1.lua_cycles_all + 2, "... but they are cycles")
  for _ = 1, 3 do collectgarbage("step"); hc:info() end -- the old sentinel ages, then is let go
  local i3 = hc:info()
  collectgarbage("collect") -- a major collection of Lua's own
  local i4 = hc:info()
  check(i4.lua_full_collections == i3.lua_full_collections + 1, "a major collection of Lua's own counts as whole-heap: "
    .. i3.lua_full_collections .. " -> " .. i4.lua_full_collections)
  check(i4.lua_collections == i3.lua_collections + 1, "... and as a collection")
  local s4 = hc:stats() -- the library sees them through the own_collections callback
  check(count(s4, "runtime_collections") == i4.lua_collections - i0.lua_collections,
    "stats runtime_collections = Lua's own since the heap was made: " .. tostring(count(s4, "runtime_collections")))
  check(count(s4, "runtime_full_collections") == i4.lua_full_collections - i0.lua_full_collections,
    "stats runtime_full_collections")
  check(s4:find('"runtime_seconds_exact":false', 1, true) ~= nil, "Lua's own seconds are not exact")
  hc:close()
  collectgarbage("restart")
end

-- The environment is the default layer; explicit options override it (issue 12)
do
  local lua = arg[-1] or "lua5.4"
  local code = [[local g = require "gcpressure"
    local h = g.new(%s)
    local s = h:stats()
    io.write(s:match('"hard_limit":(%%d+)'), " ", s:match('"policy":"([%%w_]*)"'))]]
  local function run(env, opts)
    local f = assert(io.popen(string.format("env %s %q -e %q 2>&1", env, lua, string.format(code, opts))))
    local out = f:read("a")
    f:close()
    return out
  end
  local out = run("GCPRESSURE_BACKEND=host GCPRESSURE_HARD_LIMIT=12MiB GCPRESSURE_POLICY=at_limit", "{}")
  check(out == tostring(12 * 1024 * 1024) .. " at_limit", "environment as defaults: " .. out)
  out = run("GCPRESSURE_BACKEND=host GCPRESSURE_HARD_LIMIT=12MiB GCPRESSURE_POLICY=at_limit",
    "{hard_limit = '20MiB', policy = 'cudajl'}")
  check(out == tostring(20 * 1024 * 1024) .. " cudajl", "explicit options override the environment: " .. out)
  out = run("GCPRESSURE_BACKEND=host GCPRESSURE_HARD_LIMIT=lots", "{}")
  check(out:find("GCPRESSURE_HARD_LIMIT", 1, true) ~= nil, "a bad environment value names the variable: " .. out)
end

print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
