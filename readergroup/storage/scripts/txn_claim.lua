-- txn_claim.lua: a reader that acquired input segments claims them in the consumed
-- positions of its group (consume-transform-produce, readergroup/core/transactions.py), so
-- that a decision of an earlier owner that has not landed yet is refused from now on, and
-- learns where transactions already decided left each segment.
--
-- Preludes: consumed.lua.
--
-- KEYS[1]  the consumed positions (hash: "<group>|<input segment>" -> "v2 <reset
--          generation> <fencing token> <position> <txn id>"; consumed.lua)
-- ARGV[1]  m, the number of segments
-- ARGV[2]  the group's reset generation the reader reads under
-- ARGV[3 ..]  per segment: its field, the reader's fencing token of it
--
-- A stored claim later than the reader's (higher reset generation, or the same and a higher
-- token) is left as it is (the reader's claim is stale). A stored claim of an earlier reset
-- generation is replaced, its position dropped: the group was reset since, its readers
-- start from the reset's positions, not from where transactions before the reset left them.
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, position, txn id, ...}  per segment in order: the position the last decided
--                               transaction of the reader's reset generation consumed to
--                               (-1: none) and its id ("": none; of an earlier generation
--                               too, so that a decided one still committing is completed)
local out = {}
local generation = tonumber(ARGV[2])
local at = 3
for i = 1, tonumber(ARGV[1]) do
  local field, token = ARGV[at], tonumber(ARGV[at + 1])
  local held_generation, held, position, txn = read_consumed(redis.call('HGET', KEYS[1], field))
  if held_generation < generation then
    position = -1
  end
  if outranks(generation, token, held_generation, held) then
    redis.call('HSET', KEYS[1], field, consumed_value(generation, token, position, txn))
  end
  if held_generation > generation then
    position = -1
  end
  out[#out + 1] = position
  out[#out + 1] = txn
  at = at + 2
end
return {0, unpack(out)}
