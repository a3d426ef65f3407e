-- txn_adopt.lua: resume an open transaction in another writer instance (get_txn): the
-- record passes to the caller's transactional id and epoch, fencing the instance that held
-- it (its stage, decide and abort now answer FENCED).
--
-- Preludes: time.lua.
--
-- KEYS[1]  the transaction's record (hash)
-- KEYS[2]  the stream's transactional id epochs (hash)
-- ARGV[1]  the caller's transactional id
-- ARGV[2]  the caller's epoch of it
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, state}     taken over (state OPEN), or left as it is when it is not open or is past
--                  its deadline (state: the stored one; the caller reads the record)
--   {22}           the caller's epoch is not its id's current one: fenced
--   {25}           no such transaction
local record = redis.call('HMGET', KEYS[1], 'state', 'deadline')
if not record[1] then
  return {25}
end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return {22}
end
if record[1] == 'OPEN' and server_ms() <= tonumber(record[2]) then
  redis.call('HSET', KEYS[1], 'tid', ARGV[1], 'epoch', ARGV[2])
end
return {0, record[1]}
