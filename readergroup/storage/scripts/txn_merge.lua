-- txn_merge.lua: gather open transactions into one, once per job (the Spark sink: each task
-- stages into a transaction of its own, the driver merges them and commits the result, so a
-- job's rows land all or nothing, once; readergroup/spark/source.py).
--
-- Preludes: time.lua.
--
-- KEYS[1]  the target transaction's record (hash); its id names the job, so a record found
--          there means the job was merged before (kept `retention` after it finished)
-- KEYS[2]  its staging list
-- KEYS[3]  the stream's open transactions (sorted set: id -> deadline, server ms)
-- KEYS[4]  the stream's transactional id epochs (hash)
-- KEYS[5]  the stream's transactions (sorted set: id -> created, or finished, server ms)
-- KEYS[6 .. 5 + 2m]  per source transaction: its record, its staging list
-- ARGV[1]  the target transaction id
-- ARGV[2]  transactional id of the caller
-- ARGV[3]  its epoch
-- ARGV[4]  lease, ms (the target's)
-- ARGV[5]  retention, ms
-- ARGV[6 ..]  the source transaction ids, in order
--
-- Each source must be open, held by the caller's transactional id at its current epoch and
-- within its lease. The target is begun OPEN, held by the caller, with the sources' staged
-- events in order; the sources end ABORTED (their events live on in the target).
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, events}        merged now: the target holds that many events
--   {6, state}         this job was merged before (a retry, or a replay of the job): the
--                      target's state
--   {22}               the caller's epoch is not its id's current one, or a source is held
--                      by another: fenced, nothing changed
--   {23, state}        a source is not open: nothing changed
--   {24}               a source outlived its lease: nothing changed
--   {25}               a source does not exist: nothing changed
local done = redis.call('HGET', KEYS[1], 'state')
if done then
  return {6, done}
end
if redis.call('HGET', KEYS[4], ARGV[2]) ~= ARGV[3] then
  return {22}
end
local now = server_ms()
local events, bytes = 0, 0
local m = (#KEYS - 5) / 2
for i = 1, m do
  local record = redis.call('HMGET', KEYS[4 + 2 * i], 'state', 'tid', 'epoch', 'deadline',
    'events', 'bytes')
  if not record[1] then
    return {25}
  end
  if record[1] ~= 'OPEN' then
    return {23, record[1]}
  end
  if record[2] ~= ARGV[2] or record[3] ~= ARGV[3] then
    return {22}
  end
  if now > tonumber(record[4]) then
    return {24}
  end
  events = events + tonumber(record[5])
  bytes = bytes + tonumber(record[6])
end
local deadline = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'v', 1, 'state', 'OPEN', 'tid', ARGV[2], 'epoch', ARGV[3],
  'created', now, 'deadline', deadline, 'lease', ARGV[4], 'events', events, 'bytes', bytes)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + tonumber(ARGV[5]))
redis.call('ZADD', KEYS[3], deadline, ARGV[1])
redis.call('ZADD', KEYS[5], now, ARGV[1])
for i = 1, m do
  local items = redis.call('LRANGE', KEYS[5 + 2 * i], 0, -1)
  for j = 1, #items do
    redis.call('RPUSH', KEYS[2], items[j])
  end
  redis.call('HSET', KEYS[4 + 2 * i], 'state', 'ABORTED', 'finished', now, 'merged', ARGV[1])
  redis.call('DEL', KEYS[5 + 2 * i])
  redis.call('ZREM', KEYS[3], ARGV[5 + i])
  redis.call('ZADD', KEYS[5], now, ARGV[5 + i])
  redis.call('PEXPIRE', KEYS[4 + 2 * i], tonumber(ARGV[5]))
end
if events > 0 then
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[5]))
end
return {0, events}
