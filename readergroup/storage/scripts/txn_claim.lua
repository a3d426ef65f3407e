-- txn_claim.lua: a reader that acquired input segments claims them in the consumed
-- positions of its group (consume-transform-produce, readergroup/core/transactions.py), so
-- that a decision of an earlier owner that has not landed yet is refused from now on, and
-- learns where transactions already decided left each segment.
--
-- KEYS[1]  the consumed positions (hash: "<group>|<input segment>" ->
--          "<fencing token> <position> <txn id>"; see txn_stage.lua)
-- ARGV[1]  m, the number of segments
-- ARGV[2 ..]  per segment: its field, the reader's fencing token of it
--
-- A stored token higher than the reader's is left as it is (the reader's claim is stale).
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, position, txn id, ...}  per segment in order: the position the last decided
--                               transaction consumed to (-1: none) and its id ("": none)
local out = {}
local at = 2
for i = 1, tonumber(ARGV[1]) do
  local field, token = ARGV[at], tonumber(ARGV[at + 1])
  local stored = redis.call('HGET', KEYS[1], field)
  local held, position, txn = -1, -1, ''
  if stored then
    local a, b, c = string.match(stored, '^(%S+) (%S+) ?(%S*)$')
    held, position, txn = tonumber(a), tonumber(b), c
  end
  if held < token then
    redis.call('HSET', KEYS[1], field, token .. ' ' .. position .. ' ' .. txn)
  end
  out[#out + 1] = position
  out[#out + 1] = txn
  at = at + 2
end
return {0, unpack(out)}
