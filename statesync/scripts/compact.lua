-- compact.lua: store a snapshot and truncate the log behind the previous one.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream
-- KEYS[3]  snapshot hash    KEYS[4]  writer table hash
-- ARGV[1]  revision the snapshot was taken at (must be <= head)
-- ARGV[2]  encoded snapshot
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
local meta = redis.call('HMGET', KEYS[1], 'revision', 'snap')
if not meta[1] then
  return {2}
end
local revision = tonumber(ARGV[1])
local head = tonumber(meta[1])
local previous = tonumber(meta[2])
if revision > head then
  return {5, head}
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
return {0, previous, removed}
