-- truncate_segment.lua: delete a segment's events below an offset and move its head there.
--
-- KEYS[1]  segment meta hash        KEYS[2]  segment event stream
-- ARGV[1]  new head offset (the first event kept)
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, head, removed}   head is the new head (never lower than before)
--   {2}                  the segment does not exist
--   {21, tail}           ARGV[1] is past the tail; nothing changed
local meta = redis.call('HMGET', KEYS[1], 'created_ms', 'events', 'head')
if not meta[1] then
  return {2}
end
local tail = tonumber(meta[2] or 0)
local head = tonumber(meta[3] or 0)
local offset = tonumber(ARGV[1])
if offset > tail then
  return {21, tail}
end
if offset <= head then
  return {0, head, 0}
end
local removed = redis.call('XTRIM', KEYS[2], 'MINID', string.format('%d-0', offset + 1))
redis.call('HSET', KEYS[1], 'head', offset)
return {0, offset, removed}
