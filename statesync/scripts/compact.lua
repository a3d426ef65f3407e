-- compact.lua: store a snapshot and truncate the log behind the previous one.
-- Prelude: history.lua.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream
-- KEYS[3]  snapshot hash    KEYS[4]  writer table hash
-- ARGV[1]  revision the snapshot was taken at (must be <= head)
-- ARGV[2]  encoded snapshot
-- ARGV[3]  incarnation id the snapshot's replica was loaded from ('': not checked)
-- ARGV[4]  the snapshot's history at ARGV[1] ('': not checked)
--
-- Effects: the snapshot at ARGV[1] becomes the newest; the previous newest is kept (one
-- compaction of slack for readers part-way through a catch-up); every older snapshot is
-- deleted; log entries up to the previous snapshot's revision are deleted; writer-table
-- rows whose last append was deleted are dropped.
--
-- Returns:
--   {0, truncated_through, removed_entries}   compacted
--   {2}                                        the synchronizer does not exist
--   {4, newest_snapshot_revision}              a snapshot at or past ARGV[1] exists; no-op
--   {5, head}                                  ARGV[1] is past the head; nothing written
--   {8, head, kind}                            the snapshot is of another incarnation (kind
--                                              0) or history (kind 1); nothing written
local meta = load_meta(KEYS[1])
if not meta then
  return {2}
end
local revision = tonumber(ARGV[1])
local head = meta.head
local previous = meta.snap
if ARGV[3] ~= '' and meta.inc ~= ARGV[3] then
  return {8, head, 0}
end
if revision > head then
  return {5, head}
end
local history = history_at(KEYS[2], meta, revision)
if ARGV[4] ~= '' and history and history ~= ARGV[4] then
  return {8, head, 1}
end
if revision <= previous then
  return {4, previous}
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
for _, field in ipairs(redis.call('HKEYS', KEYS[3])) do
  local kept = tonumber(field)
  if kept ~= revision and kept ~= previous then
    redis.call('HDEL', KEYS[3], field)
  end
end
local removed = redis.call('XTRIM', KEYS[2], 'MINID', string.format('%d-0', previous + 1))
local writers = redis.call('HGETALL', KEYS[4])
for i = 1, #writers, 2 do
  local last_rev = tonumber(string.match(writers[i + 1], ' (%d+)$'))
  if last_rev and last_rev <= previous then
    redis.call('HDEL', KEYS[4], writers[i])
  end
end
redis.call('HSET', KEYS[1], 'snap', revision, 'trunc', previous)
if history then
  redis.call('HSET', KEYS[1], 'snaph', history)
else
  redis.call('HDEL', KEYS[1], 'snaph')
end
if meta.snaph then
  redis.call('HSET', KEYS[1], 'trunch', meta.snaph)
else
  redis.call('HDEL', KEYS[1], 'trunch')
end
return {0, previous, removed}
