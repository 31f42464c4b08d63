-- test_options_table.lua — one behaviour per input, from Lua: every bad value
-- of tests/bad_options.txt given to gcpressure.new{...} must fail with the
-- C API's message after the option's name (Note [One error per bad value],
-- core/src/config_detail.hpp). The expected texts are the C API's own,
-- written at build time by examples/runtimes/bad_options_reasons.c into
-- $GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED. Prints "N passed, M failed" last.
local gcpressure = require "gcpressure"

-- Every failed check is listed at the end, after the count of checks.
local checks, failures = 0, {}
local function check(cond, what)
  checks = checks + 1
  if not cond then failures[#failures + 1] = what end
end

local path = assert(os.getenv("GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED"),
  "GCPRESSURE_TEST_BAD_OPTIONS_EXPECTED is not set (ctest sets it)")
local rows = {}
for line in io.lines(path) do
  local name, value, reason = line:match("^([^\t]+)\t([^\t]*)\t(.+)$")
  assert(name, path .. ": malformed line: " .. line)
  rows[#rows + 1] = { name = name, value = value, reason = reason }
end
check(#rows >= 20, "at least 20 bad values in " .. path .. " (" .. #rows .. ")")

-- The text after "invalid value for NAME: " in msg, or why there is none.
local function reason_in(msg, name)
  local key = "invalid value for " .. name .. ": "
  local at = msg:find(key, 1, true)
  if not at then return "<no '" .. key .. "' in: " .. msg .. ">" end
  return msg:sub(at + #key)
end

-- gcpressure.new with option `name` = `value` (and the host backend unless
-- the row is the backend's): the error message, or nil when it was accepted.
local function new_error(name, value)
  local opts = { backend = "host", collector = false }
  opts[name] = value
  local ok, err = pcall(gcpressure.new, opts)
  if ok then
    err:close()
    return nil
  end
  return type(err) == "table" and err.message or tostring(err)
end

for _, r in ipairs(rows) do
  local what = r.name .. " = '" .. r.value .. "'"
  local forms = { r.value }
  -- An integer is also given as a Lua number: the module writes it in
  -- decimal, so the option table sees the same text.
  local n = math.tointeger(tonumber(r.value))
  if n and tostring(n) == r.value then forms[#forms + 1] = n end
  for _, v in ipairs(forms) do
    local msg = new_error(r.name, v)
    check(msg ~= nil, what .. " (" .. type(v) .. "): accepted by gcpressure.new")
    if msg then
      check(reason_in(msg, r.name) == r.reason,
        what .. " (" .. type(v) .. "): got '" .. reason_in(msg, r.name) .. "', the C API says '" .. r.reason .. "'")
      local _, said = msg:gsub("gcpressure", "")
      check(said == 1, what .. ": 'gcpressure' said " .. said .. " times in: " .. msg)
    end
  end
end

-- Good values in Lua's own types are read as the C API reads their text.
local h = gcpressure.new{ backend = "host", collector = false, pool = false, verbose = false, gc_budget = 0.1,
                          every_n = 2, hard_limit = "64 MB", async_release_threshold = 0 }
check(h ~= nil, "Lua-typed good values")
if h then h:close() end

for _, f in ipairs(failures) do io.stderr:write("FAIL: ", f, "\n") end
print((checks - #failures) .. " passed, " .. #failures .. " failed")
os.exit(#failures == 0 and 0 or 1)
