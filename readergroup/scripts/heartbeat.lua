-- heartbeat.lua: renew one reader's heartbeat and return every heartbeat with the server time.
--
-- KEYS[1]  heartbeat hash of the group (reader id -> "<generation> <server ms>")
-- ARGV[1]  reader id, or "" to renew nothing (an observer's read)
-- ARGV[2]  the reader's membership generation
--
-- Returns {server_ms, {reader id, "<generation> <ms>", ...}}: liveness is judged on this one
-- clock, never on the readers' own clocks.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ms)
end
return {ms, redis.call('HGETALL', KEYS[1])}
