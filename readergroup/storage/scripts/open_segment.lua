-- open_segment.lua: open a successor created by create_closed_segment.lua to writes.
--
-- KEYS[1]  segment meta hash
--
-- The caller opens a segment only after sealing all its predecessors. Opening is conditional
-- on the `opening` flag, which seal_segment.lua clears: a segment sealed for real (the stream
-- sealed, or the segment scaled away) stays sealed.
--
-- Returns:
--   {0, 1}   opened now
--   {0, 0}   nothing to open (already open, or sealed for real)
--   {2}      the segment does not exist
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {2}
end
if redis.call('HGET', KEYS[1], 'opening') ~= '1' then
  return {0, 0}
end
redis.call('HDEL', KEYS[1], 'sealed', 'opening')
return {0, 1}
