-- txn_replan.lua: replace a committing transaction's plan (an entry's segment was sealed
-- before it took the entry: its events go to the segments current now), compare-and-set.
--
-- KEYS[1]  the transaction's record (hash)
-- ARGV[1]  the plan version the new plan was made from
-- ARGV[2]  the new plan (JSON)
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, version}    the new plan is in, under this version
--   {1, version}    the plan changed since ARGV[1] (another completer's): nothing written
--   {23, state}     the transaction is not COMMITTING
--   {25}            no such transaction
local record = redis.call('HMGET', KEYS[1], 'state', 'pv')
if not record[1] then
  return {25}
end
if record[1] ~= 'COMMITTING' then
  return {23, record[1]}
end
if record[2] ~= ARGV[1] then
  return {1, tonumber(record[2])}
end
local version = tonumber(record[2]) + 1
redis.call('HSET', KEYS[1], 'plan', ARGV[2], 'pv', version)
return {0, version}
