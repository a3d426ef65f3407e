-- wake.lua: a writer's second wake-up for an entry that landed past entries its replica had
-- not applied (a keyed append beside others, or an unconditional one): append.lua woke the
-- followers the writer named on its older replica; having read the log since, the writer
-- names them again on the state it read (see the synchronizer's `_wake_again`).
-- Preludes: time.lua, history.lua, followers.lua.
--
-- KEYS[1]  meta hash        KEYS[2]  wake stream (every follower's)
-- KEYS[3]  wakers sorted set          KEYS[4..] the wake streams of the followers in ARGV[2]
-- ARGV[1]  the revision the writer read the log up to (at or past its entry)
-- ARGV[2]  the followers to wake, newline-separated, in the order of KEYS[4..]; '': every
--          follower (KEYS[2])
-- ARGV[3]  time to live of the followers' wake streams, ms (as append.lua's ARGV[13])
--
-- Returns:
--   {0, revision}   wake-up entry `<ARGV[1]>-1` added to the wake streams (each trimmed as
--                   append.lua does) of the followers, or to KEYS[2]
--   {4, revision}   every one of those streams already has an entry at or past
--                   `<ARGV[1]>-1` (a later entry's writer decided whom to wake on a newer
--                   state, or another writer woke them for this one); nothing written
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
local wake_id = string.format('%d-1', revision)
if ARGV[2] == '' then
  local added = redis.pcall('XADD', KEYS[2], 'MAXLEN', 16, wake_id, 'r', revision)
  if type(added) == 'table' and added.err then
    return {4, revision}
  end
  return {0, revision}
end
if wake_followers(KEYS[3], 4, ARGV[2], wake_id, revision, server_ms(), tonumber(ARGV[3])) == 0 then
  return {4, revision}
end
return {0, revision}
