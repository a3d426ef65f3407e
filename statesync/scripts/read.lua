-- read.lua: read one page of a synchronizer's log, atomically.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream        KEYS[3]  snapshot hash
-- ARGV[1]  the reader's revision: entries after it are wanted (-1: the reader has nothing)
-- ARGV[2]  most entries to return
--
-- Returns:
--   {2}                                                      the synchronizer does not exist
--   {0, head, incarnation, snapshot_revision, snapshot, entries}
--       head: revision of the newest entry; incarnation: id set by initialize
--       snapshot_revision: -1 and snapshot nil when the entries after ARGV[1] are all
--         still in the log; else the newest snapshot, and `entries` follow it
--       entries: XRANGE reply, [[ "<revision>-0", ["d", payload, "t", server_ms]], ...]
local meta = redis.call('HMGET', KEYS[1], 'revision', 'trunc', 'snap', 'inc')
if not meta[1] then
  return {2}
end
local head = tonumber(meta[1])
local after = tonumber(ARGV[1])
local snapshot_revision = -1
local snapshot = false
if after < tonumber(meta[2]) then
  snapshot_revision = tonumber(meta[3])
  snapshot = redis.call('HGET', KEYS[3], meta[3])
  after = snapshot_revision
end
local entries = {}
if after < head then
  entries = redis.call('XRANGE', KEYS[2], string.format('%d-0', after + 1), '+',
    'COUNT', tonumber(ARGV[2]))
end
return {0, head, meta[4], snapshot_revision, snapshot, entries}
