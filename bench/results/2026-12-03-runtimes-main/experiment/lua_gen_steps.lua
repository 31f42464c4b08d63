-- The first young steps after a 32 MiB Lua heap is built, with ("clean") and without a full
-- collection first: lua5.4 lua_gen_steps.lua [clean]. Prints each of 8 steps' CPU time.
collectgarbage("generational")
local clean = arg[1] == "clean"
local host_heap
local target = collectgarbage("count") + 32 * 1024
local n = 0
while collectgarbage("count") < target do
  for _ = 1, 1000 do host_heap = { next = host_heap, n = n }; n = n + 1 end
end
if clean then collectgarbage("collect") end
for i = 1, 8 do
  local junk = {}
  for k = 1, 20000 do junk[k] = {k} end
  local t = os.clock(); collectgarbage("step", 0); io.write(string.format("%.2f ms  ", (os.clock() - t) * 1e3))
end
print(collectgarbage("count") // 1024, "MiB")
