-- read.lua: read one page of a synchronizer's log, atomically. Prelude: history.lua.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream        KEYS[3]  snapshot hash
-- ARGV[1]  the reader's revision: entries after it are wanted (-1: the reader has nothing)
-- ARGV[2]  most entries to return
-- ARGV[3]  largest entry payload to return, in bytes (-1 or absent: no limit)
-- ARGV[4]  largest snapshot to return, in bytes (-1 or absent: no limit)
--
-- Returns:
--   {2}                                                      the synchronizer does not exist
--   {0, head, incarnation, snapshot_revision, snapshot, entries, anchor, snapshot_history,
--    snapshot_refused}
--       head: revision of the newest entry; incarnation: id set by initialize
--       snapshot_revision: -1 and snapshot nil when the entries after ARGV[1] are all
--         still in the log; else the newest snapshot, and `entries` follow it
--       entries: XRANGE reply, [[ "<revision>-0", ["d", payload, "t", server_ms,
--         "h", history]], ...]; a payload over ARGV[3] is not sent: it is "" and the
--         fields end "x", its size
--       anchor: the log's history at ARGV[1] when no snapshot is returned (the reader
--         compares it with its own), else false; false too when it is not known
--       snapshot_history: the history at snapshot_revision, or false
--       snapshot_refused: 0, or the snapshot's size when it is over ARGV[4] (snapshot nil)
local meta = load_meta(KEYS[1])
if not meta then
  return {2}
end
local head = meta.head
local after = tonumber(ARGV[1])
local max_entry = tonumber(ARGV[3] or '-1')
local max_snapshot = tonumber(ARGV[4] or '-1')
local snapshot_revision = -1
local snapshot = false
local anchor = false
local snapshot_history = false
local snapshot_refused = 0
if after < meta.trunc then
  snapshot_revision = meta.snap
  local size = redis.call('HSTRLEN', KEYS[3], tostring(meta.snap))
  if max_snapshot >= 0 and size > max_snapshot then
    snapshot_refused = size
  else
    snapshot = redis.call('HGET', KEYS[3], tostring(meta.snap))
  end
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
if max_entry >= 0 then
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    for i = 1, #fields - 1, 2 do
      if fields[i] == 'd' and string.len(fields[i + 1]) > max_entry then
        local size = string.len(fields[i + 1])
        fields[i + 1] = ''
        fields[#fields + 1] = 'x'
        fields[#fields + 1] = tostring(size)
      end
    end
  end
end
return {0, head, meta.inc, snapshot_revision, snapshot, entries, anchor, snapshot_history,
  snapshot_refused}
