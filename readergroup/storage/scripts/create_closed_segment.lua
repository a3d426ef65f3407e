-- create_closed_segment.lua: create a scale's successor segment closed to writes.
--
-- KEYS[1]  segment meta hash
-- ARGV[1]  creation server time, ms
--
-- A successor is born sealed with the flag `opening`: writers that already route to it get the
-- sealed reply and retry, until open_segment.lua opens it once every predecessor is sealed. So
-- every event of a successor is appended after every event of its predecessors (time cuts are
-- exact). seal_segment.lua clears `opening`, so a real seal is never undone.
--
-- Returns:
--   {0, 1}   created now
--   {0, 0}   it existed already (left alone: creation is idempotent)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, 0}
end
redis.call('HSET', KEYS[1], 'created_ms', ARGV[1], 'sealed', '1', 'opening', '1')
return {0, 1}
