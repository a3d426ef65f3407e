-- read.lua: read one page of a synchronizer's log, atomically. Prelude: history.lua.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream        KEYS[3]  snapshot hash
-- ARGV[1]  the reader's revision: entries after it are wanted (-1: the reader has nothing)
-- ARGV[2]  most entries to return
--
-- Returns:
--   {2}                                                      the synchronizer does not exist
--   {0, head, incarnation, snapshot_revision, snapshot, entries, anchor, snapshot_history}
--       head: revision of the newest entry; incarnation: id set by initialize
--       snapshot_revision: -1 and snapshot nil when the entries after ARGV[1] are all
--         still in the log; else the newest snapshot, and `entries` follow it
--       entries: XRANGE reply, [[ "<revision>-0", ["d", payload, "t", server_ms,
--         "h", history]], ...]
--       anchor: the log's history at ARGV[1] when no snapshot is returned (the reader
--         compares it with its own), else false; false too when it is not known
--       snapshot_history: the history at snapshot_revision, or false
local meta = load_meta(KEYS[1])
if not meta then
  return {2}
end
local head = meta.head
local after = tonumber(ARGV[1])
local snapshot_revision = -1
local snapshot = false
local anchor = false
local snapshot_history = false
if after < meta.trunc then
  snapshot_revision = meta.snap
  snapshot = redis.call('HGET', KEYS[3], tostring(meta.snap))
  snapshot_history = meta.snaph
  after = snapshot_revision
else
  anchor = history_at(KEYS[2], meta, after)
end
local entries = {}
if after < head then
  entries = redis.call('XRANGE', KEYS[2], string.format('%d-0', after + 1), '+',
    'COUNT', tonumber(ARGV[2]))
end
return {0, head, meta.inc, snapshot_revision, snapshot, entries, anchor, snapshot_history}
