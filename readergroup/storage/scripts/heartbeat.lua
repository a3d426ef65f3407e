-- heartbeat.lua: renew one reader's heartbeat, or forget it, and return every heartbeat with
-- the server time.
--
-- KEYS[1]  heartbeat hash of the group (reader id -> "<generation> <server ms>")
-- ARGV[1]  reader id, or "" to change nothing (an observer's read)
-- ARGV[2]  the reader's membership generation
-- ARGV[3]  "beat" (default), "forget" or "claim"
--
-- "beat" and "forget" are conditional on the generation: "beat" writes only if the stored
-- entry is of this generation or older, "forget" deletes only such an entry. A zombie (an
-- older generation of the same reader id) can neither overwrite nor delete its replacement's
-- heartbeat. "claim" writes whatever is stored: a join just decided, on the group's newest
-- state, that no other incarnation of this id is online.
--
-- Liveness is judged on the server's clock (server_ms() of the time.lua prelude), never on the
-- readers' own clocks.
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, server_ms, {reader id, "<generation> <ms>", ...}}   done (whatever the action did)
local ms = server_ms()
if ARGV[1] ~= '' then
  local generation = tonumber(ARGV[2])
  local current = redis.call('HGET', KEYS[1], ARGV[1])
  local stored = current and tonumber(string.match(current, '^(%d+) '))
  local mine = (not stored) or stored <= generation
  if ARGV[3] == 'claim' then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ms)
  elseif ARGV[3] == 'forget' then
    if current and mine then
      redis.call('HDEL', KEYS[1], ARGV[1])
    end
  elseif mine then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ms)
  end
end
return {0, ms, redis.call('HGETALL', KEYS[1])}
