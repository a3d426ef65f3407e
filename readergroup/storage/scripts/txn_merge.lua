-- txn_merge.lua: one bounded step of gathering open transactions into one, once per job (the
-- Spark sink: each task stages into a transaction of its own, the driver merges them and
-- commits the result, so a job's rows land all or nothing, once; readergroup/spark/source.py).
--
-- Preludes: time.lua.
--
-- KEYS[1]  the target transaction's record (hash); its id names the job, so a record found
--          there means the job was merged before, or is being merged (state MERGING)
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
-- ARGV[6]  the most staging items this call moves (at least 1)
-- ARGV[7]  the most bytes this call moves (an item larger than that is moved alone)
-- ARGV[8 ..]  the source transaction ids, in order
--
-- The first call checks that each source is open, held by the caller's transactional id at
-- its current epoch and within its lease; then, in the same step, the target is begun
-- MERGING (record field "sources": the source ids, JSON; "cursor": the source being moved,
-- from 1) held by the caller, and the sources end ABORTED ("merged": the target), their
-- staging lists kept for the target. Every call (this one too) then moves at most ARGV[6]
-- items / ARGV[7] bytes from the front of the cursor's staging lists to the back of the
-- target's, in order, and renews the target's lease (deadline = now + lease) and the Redis
-- TTLs of the target and the staging lists not moved yet (lease + retention). When every
-- source list is empty the target becomes OPEN: an ordinary open transaction.
--
-- A MERGING target is resumed by any call of the caller's transactional id at its current
-- epoch (a newer epoch takes it over, fencing the older); the sources must be the stored
-- ones. Past its deadline it is aborted (here, or by the sweeper through txn_finish.lua;
-- staging lists not moved yet then go with their TTL).
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, state, moved, events}  a step done: state MERGING (call again) or OPEN (merged);
--                              moved: staging items moved by this call; events: the target's
--   {6, state}         this job was merged before (a retry, or a replay of the job): the
--                      target's state (not MERGING)
--   {22}               the caller's epoch is not its id's current one, or a source (or the
--                      MERGING target) is held by another id: fenced, nothing changed
--   {23, state}        a source is not open, or the target is MERGING other sources:
--                      nothing changed
--   {24}               a source outlived its lease: nothing changed; or the MERGING target
--                      did: aborted now (its staging lists deleted)
--   {25}               a source does not exist: nothing changed
local state = redis.call('HGET', KEYS[1], 'state')
if state and state ~= 'MERGING' then
  return {6, state}
end
if redis.call('HGET', KEYS[4], ARGV[2]) ~= ARGV[3] then
  return {22}
end
local now = server_ms()
local lease, retention = tonumber(ARGV[4]), tonumber(ARGV[5])
local m = (#KEYS - 5) / 2
local sources = {}
for i = 1, m do
  sources[i] = ARGV[7 + i]
end
local listed = cjson.encode(sources)
if not state then
  local events, bytes = 0, 0
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
  redis.call('HSET', KEYS[1], 'v', 1, 'state', 'MERGING', 'tid', ARGV[2], 'epoch', ARGV[3],
    'created', now, 'deadline', now + lease, 'lease', ARGV[4], 'events', events,
    'bytes', bytes, 'sources', listed, 'cursor', 1)
  redis.call('ZADD', KEYS[5], now, ARGV[1])
  for i = 1, m do
    redis.call('HSET', KEYS[4 + 2 * i], 'state', 'ABORTED', 'finished', now, 'merged', ARGV[1])
    redis.call('ZREM', KEYS[3], ARGV[7 + i])
    redis.call('ZADD', KEYS[5], now, ARGV[7 + i])
    redis.call('PEXPIRE', KEYS[4 + 2 * i], retention)
  end
else
  local record = redis.call('HMGET', KEYS[1], 'tid', 'deadline', 'sources')
  if record[1] ~= ARGV[2] then
    return {22}
  end
  if record[3] ~= listed then
    return {23, state}
  end
  if now > tonumber(record[2]) then
    redis.call('HSET', KEYS[1], 'state', 'ABORTED', 'finished', now)
    redis.call('DEL', KEYS[2])
    for i = 1, m do
      redis.call('DEL', KEYS[5 + 2 * i])
    end
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZADD', KEYS[5], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[1], retention)
    return {24}
  end
  redis.call('HSET', KEYS[1], 'epoch', ARGV[3])
end
local cursor = tonumber(redis.call('HGET', KEYS[1], 'cursor'))
local most_items, most_bytes = tonumber(ARGV[6]), tonumber(ARGV[7])
local moved, moved_bytes = 0, 0
while cursor <= m and moved < most_items and moved_bytes < most_bytes do
  local item = redis.call('LPOP', KEYS[5 + 2 * cursor])
  if item then
    redis.call('RPUSH', KEYS[2], item)
    moved = moved + 1
    moved_bytes = moved_bytes + #item
  else
    cursor = cursor + 1
  end
end
local deadline = now + lease
local ttl = lease + retention
redis.call('ZADD', KEYS[3], deadline, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local events = tonumber(redis.call('HGET', KEYS[1], 'events'))
if cursor > m then
  redis.call('HSET', KEYS[1], 'state', 'OPEN', 'deadline', deadline, 'cursor', cursor)
  return {0, 'OPEN', moved, events}
end
redis.call('HSET', KEYS[1], 'deadline', deadline, 'cursor', cursor)
for i = cursor, m do
  if redis.call('EXISTS', KEYS[5 + 2 * i]) == 1 then
    redis.call('PEXPIRE', KEYS[5 + 2 * i], ttl)
  end
end
return {0, 'MERGING', moved, events}
