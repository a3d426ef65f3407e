-- heartbeat.lua: renew one reader's heartbeat, or forget it; return the server time and, to an
-- observer or to the member whose turn it is to judge expiries, every heartbeat.
--
-- KEYS[1]  heartbeat hash of the group (reader id -> "<generation> <server ms>"; and "~due" ->
--          server ms from which the next member to renew judges expiries)
-- KEYS[2]  the group's hash of registered clients (reader id -> "host/pid"), same hash tag
-- ARGV[1]  reader id, or "" to change nothing (an observer's read)
-- ARGV[2]  the reader's membership generation
-- ARGV[3]  "beat" (default), "forget", "claim" or "renew"
-- ARGV[4]  ("renew") the session timeout, ms
-- ARGV[5]  ("renew") least ms between two judgements
-- ARGV[6]  ("renew") "1": judge now whatever "~due" says
--
-- "beat" and "forget" are conditional on the generation: "beat" writes only if the stored
-- entry is of this generation or older, "forget" deletes only such an entry, and with it the
-- reader's registered client (the records of a reader gone for good go in the same step). A
-- zombie (an older generation of the same reader id) can neither overwrite nor delete its
-- replacement's heartbeat; "forget" of the last reader deletes the hash ("~due" included). "claim" writes
-- whatever is stored: a join just decided, on the group's newest state, that no other
-- incarnation of this id is online.
--
-- "renew" is a member's periodic "beat" at O(1) cost: it returns the reader's own entry as it
-- was before this write (so the member sees whether the hash lost its beats) and, only once the
-- server time reaches "~due" (or ARGV[6] asks), every heartbeat; "~due" then moves to when the
-- oldest listed beat would expire, at least ARGV[5] ms ahead. So one member per interval reads
-- the whole hash (O(readers) per interval for the group), not every member on every beat.
--
-- Liveness is judged on the server's clock (server_ms() of the time.lua prelude), never on the
-- readers' own clocks.
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, server_ms, {reader id, "<generation> <ms>", ...}}   "beat", "forget", "claim", observer
--   {0, server_ms, {...} or {}, own entry before or "", 1 or 0}   "renew" (1: it judges: every
--                                                             heartbeat listed)
local ms = server_ms()
if ARGV[1] == '' then
  return {0, ms, redis.call('HGETALL', KEYS[1])}
end
local generation = tonumber(ARGV[2])
local action = ARGV[3]
local current, due
if action == 'renew' then
  local got = redis.call('HMGET', KEYS[1], ARGV[1], '~due')
  current, due = got[1], tonumber(got[2])
else
  current = redis.call('HGET', KEYS[1], ARGV[1])
end
local stored = current and tonumber(string.match(current, '^(%d+) '))
local mine = (not stored) or stored <= generation
if action == 'claim' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ms)
elseif action == 'forget' then
  if current and mine then
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[2], ARGV[1])
    if redis.call('HLEN', KEYS[1]) == 1 then
      -- at most "~due" is left: no reader, nothing to judge (and the emptied hash is gone)
      redis.call('HDEL', KEYS[1], '~due')
    end
  end
elseif mine then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ms)
end
if action ~= 'renew' then
  return {0, ms, redis.call('HGETALL', KEYS[1])}
end
if due and ms < due and ARGV[6] ~= '1' then
  return {0, ms, {}, current or '', 0}
end
local flat = redis.call('HGETALL', KEYS[1])
local session = tonumber(ARGV[4])
local next_due = ms + session
for i = 2, #flat, 2 do
  local beat = tonumber(string.match(flat[i], ' (%d+)$') or '')
  if beat and beat + session + 1 < next_due then
    next_due = beat + session + 1
  end
end
next_due = math.max(next_due, ms + tonumber(ARGV[5]))
redis.call('HSET', KEYS[1], '~due', string.format('%d', next_due))
return {0, ms, flat, current or '', 1}
