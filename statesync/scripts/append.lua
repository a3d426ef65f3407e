-- append.lua: append one entry to a synchronizer's log, conditionally and idempotently,
-- only from a writer whose replica belongs to the log's incarnation and history.
-- Prelude: history.lua.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream        KEYS[3]  writer table hash
-- ARGV[1]  expected head revision, or -1 for an unconditional append
-- ARGV[2]  entry payload (opaque bytes)
-- ARGV[3]  largest payload allowed, in bytes
-- ARGV[4]  writer id
-- ARGV[5]  writer's sequence number for this append (1, 2, ...; a retry reuses it)
-- ARGV[6]  incarnation id the writer's replica was loaded from ('': not checked)
-- ARGV[7]  revision of the writer's replica (-1: none); for a conditional append, ARGV[1]
-- ARGV[8]  the writer's history at ARGV[7] ('': not checked)
--
-- Returns:
--   {0, revision, server_ms, history}   appended as entry `revision` stamped with server time
--   {1, head}                  conflict: the head is not ARGV[1]; nothing written
--   {2}                        the synchronizer does not exist; nothing written
--   {3, size, limit}           payload too large; nothing written
--   {6, revision}              this writer's sequence already landed at `revision`
--                              (a retry of an append whose reply was lost); nothing written
--   {8, head, kind}            the writer's replica is not of this log: kind 0, another
--                              incarnation (deleted and created again); kind 1, another
--                              history (the log lost entries the writer applied); nothing
--                              written
local meta = load_meta(KEYS[1])
if not meta then
  return {2}
end
local head = meta.head
local sequence = tonumber(ARGV[5])
local last = redis.call('HGET', KEYS[3], ARGV[4])
if last then
  local last_seq, last_rev = string.match(last, '^(%d+) (%d+)$')
  if tonumber(last_seq) >= sequence then
    -- rewritten (same value) so that a WAIT after this reply covers the earlier append too
    redis.call('HSET', KEYS[3], ARGV[4], last)
    return {6, tonumber(last_rev)}
  end
end
if ARGV[6] ~= '' and meta.inc ~= ARGV[6] then
  return {8, head, 0}
end
local anchor = tonumber(ARGV[7])
if anchor > head then
  return {8, head, 1}
end
local expected = tonumber(ARGV[1])
if expected >= 0 and expected ~= head then
  return {1, head}
end
if ARGV[8] ~= '' and anchor >= 0 then
  local known = history_at(KEYS[2], meta, anchor)
  if known and known ~= ARGV[8] then
    return {8, head, 1}
  end
end
local size = string.len(ARGV[2])
if size > tonumber(ARGV[3]) then
  return {3, size, tonumber(ARGV[3])}
end
local ms = server_ms()
local revision = head + 1
local history = redis.sha1hex((meta.hash or meta.inc or '') .. ARGV[2])
redis.call('XADD', KEYS[2], string.format('%d-0', revision), 'd', ARGV[2], 't', ms,
  'h', history)
redis.call('HSET', KEYS[1], 'revision', revision, 'hash', history)
redis.call('HSET', KEYS[3], ARGV[4], string.format('%d %d', sequence, revision))
return {0, revision, ms, history}
