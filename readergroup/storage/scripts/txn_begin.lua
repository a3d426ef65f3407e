-- txn_begin.lua: begin a transaction (readergroup/core/transactions.py: states and keys).
--
-- Preludes: time.lua.
--
-- KEYS[1]  the transaction's record (hash)
-- KEYS[2]  the stream's open transactions (sorted set: id -> deadline, server ms)
-- KEYS[3]  the stream's transactional id epochs (hash: transactional id -> epoch)
-- KEYS[4]  the stream's transactions (sorted set: id -> created, or finished, server ms;
--          the index that finds every key when the stream is deleted)
-- ARGV[1]  transaction id (the member of KEYS[2])
-- ARGV[2]  transactional id
-- ARGV[3]  the caller's epoch of it
-- ARGV[4]  lease, ms
-- ARGV[5]  retention, ms: the record expires that long after its deadline unless renewed
--          or decided (so an abandoned transaction leaves nothing even if no client sweeps)
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, created_ms, deadline_ms}  begun: OPEN until deadline_ms unless renewed
--   {22}                           the caller's epoch is not its id's current one: fenced
--   {23, state}                    a transaction of this id exists already: nothing written
if redis.call('HGET', KEYS[3], ARGV[2]) ~= ARGV[3] then
  return {22}
end
local state = redis.call('HGET', KEYS[1], 'state')
if state then
  return {23, state}
end
local now = server_ms()
local deadline = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'v', 1, 'state', 'OPEN', 'tid', ARGV[2], 'epoch', ARGV[3],
  'created', now, 'deadline', deadline, 'lease', ARGV[4], 'events', 0, 'bytes', 0)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + tonumber(ARGV[5]))
redis.call('ZADD', KEYS[2], deadline, ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
return {0, now, deadline}
