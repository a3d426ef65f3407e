-- time.lua: prelude of every script that stamps server time (prepended when loaded; not a
-- script on its own). Shared by statesync's scripts and readergroup's segment scripts.
--
-- server_ms() -> the Redis server's clock in milliseconds since the epoch (TIME, truncated):
--   the one clock every stored time is stamped with, never a client's.
local function server_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
