-- txn_finish.lua: end a transaction: COMMITTED (after its completion) or ABORTED.
--
-- Preludes: time.lua.
--
-- KEYS[1]  the transaction's record (hash)
-- KEYS[2]  its staging list
-- KEYS[3]  the stream's open transactions (sorted set)
-- KEYS[4]  the stream's transactions (sorted set: id -> created, or finished, server ms)
-- KEYS[5]  "commit" only: the stream's landed plan entries (sorted set: "<segment>|<writer
--          id>" -> finished server ms), whose fields in the segments' writer tables the
--          sweep deletes once they are older than the retention
-- ARGV[1]  transaction id
-- ARGV[2]  "commit": COMMITTING -> COMMITTED (every plan entry is in its segment);
--          "abort": OPEN (or MERGING) -> ABORTED by the caller ARGV[4] holding it;
--          "force": OPEN (or MERGING) -> ABORTED whoever asks (an operator);
--          "expire": OPEN (or MERGING) -> ABORTED only past its deadline (the sweeper; a
--          MERGING one's source staging lists not moved yet go with their Redis TTL)
-- ARGV[3]  how long the finished record is kept, ms
-- ARGV[4]  the caller, "<epoch>:<transactional id>" ("abort")
-- ARGV[5 ..] "commit": the landed entries, "<segment>|<writer id>" each
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, state}     finished now (state: COMMITTED or ABORTED)
--   {6, state}     finished before in the same way: nothing changed
--   {22}           "abort" by a caller not holding it: fenced
--   {23, state}    it cannot end this way from where it is (an abort of a committing or
--                  committed one, a commit of an open or aborted one, an expiry before the
--                  deadline): nothing changed
--   {25}           no such transaction ("expire": its record expired, left by every client
--                  past its deadline + retention: it leaves the open transactions too)
local record = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'deadline', 'tid')
local state = record[1]
if not state then
  if ARGV[2] == 'expire' then
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  return {25}
end
local mode = ARGV[2]
local target = 'ABORTED'
if mode == 'commit' then
  target = 'COMMITTED'
end
if state == target then
  return {6, state}
end
local now = server_ms()
if mode == 'commit' then
  if state ~= 'COMMITTING' then
    return {23, state}
  end
else
  if state ~= 'OPEN' and state ~= 'MERGING' then
    return {23, state}
  end
  if mode == 'abort' and ARGV[4] ~= record[2] .. ':' .. record[4] then
    return {22}
  end
  if mode == 'expire' and now <= tonumber(record[3]) then
    return {23, state}
  end
end
redis.call('HSET', KEYS[1], 'state', target, 'finished', now)
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
for i = 5, #ARGV do
  redis.call('ZADD', KEYS[5], now, ARGV[i])
end
return {0, target}
