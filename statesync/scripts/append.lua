-- append.lua: append one entry to a synchronizer's log, conditionally and idempotently.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream        KEYS[3]  writer table hash
-- ARGV[1]  expected head revision, or -1 for an unconditional append
-- ARGV[2]  entry payload (opaque bytes)
-- ARGV[3]  largest payload allowed, in bytes
-- ARGV[4]  writer id
-- ARGV[5]  writer's sequence number for this append (1, 2, ...; a retry reuses it)
--
-- Returns:
--   {0, revision, server_ms}   appended as entry `revision` stamped with server time
--   {1, head}                  conflict: the head is not ARGV[1]; nothing written
--   {2}                        the synchronizer does not exist; nothing written
--   {3, size, limit}           payload too large; nothing written
--   {6, revision}              this writer's sequence already landed at `revision`
--                              (a retry of an append whose reply was lost); nothing written
local head = redis.call('HGET', KEYS[1], 'revision')
if not head then
  return {2}
end
head = tonumber(head)
local sequence = tonumber(ARGV[5])
local last = redis.call('HGET', KEYS[3], ARGV[4])
if last then
  local last_seq, last_rev = string.match(last, '^(%d+) (%d+)$')
  if tonumber(last_seq) >= sequence then
    return {6, tonumber(last_rev)}
  end
end
local expected = tonumber(ARGV[1])
if expected >= 0 and expected ~= head then
  return {1, head}
end
local size = string.len(ARGV[2])
if size > tonumber(ARGV[3]) then
  return {3, size, tonumber(ARGV[3])}
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local revision = head + 1
redis.call('XADD', KEYS[2], string.format('%d-0', revision), 'd', ARGV[2], 't', ms)
redis.call('HSET', KEYS[1], 'revision', revision)
redis.call('HSET', KEYS[3], ARGV[4], string.format('%d %d', sequence, revision))
return {0, revision, ms}
