-- initialize.lua: create a synchronizer with its initial snapshot at revision 0.
--
-- KEYS[1]  meta hash        KEYS[2]  snapshot hash
-- KEYS[3]  log stream       KEYS[4]  writer table hash
-- KEYS[5]  wake stream (optional)
-- ARGV[1]  encoded initial snapshot (revision 0)
-- ARGV[2]  incarnation id (random; tells a re-created synchronizer from the old one, and
--          starts the chain of histories: the history at revision 0, see history.lua)
-- ARGV[3]  format version of the payloads
--
-- Returns:
--   {0}   created: meta, snapshot 0; any leftover log, writer table and wake stream removed
--   {7}   already exists: nothing written (the first writer wins)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {7}
end
local ms = server_ms()
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
if KEYS[5] then
  redis.call('DEL', KEYS[5])
end
redis.call('HSET', KEYS[1], 'revision', 0, 'trunc', 0, 'snap', 0, 'inc', ARGV[2],
  'format', ARGV[3], 'created_ms', ms, 'hash', ARGV[2], 'snaph', ARGV[2], 'trunch', ARGV[2])
redis.call('HSET', KEYS[2], '0', ARGV[1])
return {0}
