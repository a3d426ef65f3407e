-- seal_segment.lua: stop a segment taking writes (idempotent).
--
-- KEYS[1]  segment meta hash
--
-- Clears `opening` (see create_closed_segment.lua): a sealed segment is never opened again.
--
-- Returns:
--   {0, tail, bytes}   sealed (now or before); tail is its final event count
--   {2}                the segment does not exist
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {2}
end
redis.call('HSET', KEYS[1], 'sealed', '1')
redis.call('HDEL', KEYS[1], 'opening')
local meta = redis.call('HMGET', KEYS[1], 'events', 'bytes')
return {0, tonumber(meta[1] or 0), tonumber(meta[2] or 0)}
