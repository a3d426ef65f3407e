-- offset_at_time.lua: the first offset whose server append time is at or after a time.
--
-- KEYS[1]  segment meta hash        KEYS[2]  segment event stream
-- ARGV[1]  server time, ms
--
-- Server times (field t) never decrease along a segment, so this is a binary search over
-- [head, tail): O(log n) point reads inside one atomic call.
--
-- Returns:
--   {0, offset, tail}   offset in [head, tail]; tail when every event is older
--   {2}                 the segment does not exist
local meta = redis.call('HMGET', KEYS[1], 'created_ms', 'events', 'head')
if not meta[1] then
  return {2}
end
local lo = tonumber(meta[3] or 0)
local hi = tonumber(meta[2] or 0)
local tail = hi
local target = tonumber(ARGV[1])
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  local entry = redis.call('XRANGE', KEYS[2], string.format('%d-0', mid + 1),
    string.format('%d-18446744073709551615', mid + 1), 'COUNT', 1)[1]
  local t = 0
  if entry then
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 't' then
        t = tonumber(fields[i + 1])
      end
    end
  end
  if t < target then
    lo = mid + 1
  else
    hi = mid
  end
end
return {0, lo, tail}
