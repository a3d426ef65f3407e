-- wake.lua: a writer's second wake-up for an entry that landed past entries its replica had
-- not applied (a keyed append beside others, or an unconditional one): append.lua woke the
-- followers the writer named on its older replica; having read the log since, the writer
-- names them again on the state it read (see the synchronizer's `_wake_again`).
-- Prelude: history.lua.
--
-- KEYS[1]  meta hash        KEYS[2]  wake stream
-- ARGV[1]  the revision the writer read the log up to (at or past its entry)
-- ARGV[2]  the followers to wake, newline-separated; '': every follower
--
-- Returns:
--   {0, revision}   wake-up entry `<ARGV[1]>-1` written, with field `to` = ARGV[2] unless
--                   that is '' (the stream trimmed to the newest 16, as append.lua does)
--   {4, top}        the wake stream already has an entry at or past `<ARGV[1]>-1` (a later
--                   entry's writer decided whom to wake on a newer state, or another writer
--                   woke them for this one); nothing written. `top`: that entry's revision
--   {5, head}       ARGV[1] is past the log's head (the log lost entries since the writer
--                   read it); nothing written
--   {2}             the synchronizer does not exist; nothing written
local meta = load_meta(KEYS[1])
if not meta then
  return {2}
end
local revision = tonumber(ARGV[1])
if revision > meta.head then
  return {5, meta.head}
end
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if top then
  local top_revision, top_sequence = string.match(top[1], '^(%d+)-(%d+)$')
  top_revision, top_sequence = tonumber(top_revision), tonumber(top_sequence)
  if top_revision > revision or (top_revision == revision and top_sequence >= 1) then
    return {4, top_revision}
  end
end
local wake_id = string.format('%d-1', revision)
if ARGV[2] ~= '' then
  redis.call('XADD', KEYS[2], 'MAXLEN', 16, wake_id, 'r', revision, 'to', ARGV[2])
else
  redis.call('XADD', KEYS[2], 'MAXLEN', 16, wake_id, 'r', revision)
end
return {0, revision}
