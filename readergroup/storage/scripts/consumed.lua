-- consumed.lua: prelude of txn_claim.lua and txn_stage.lua (prepended when loaded; not a
-- script on its own): the values of the consume-transform-produce positions hash
-- ("<group>|<input segment>" -> value; readergroup/client/txn_positions.py).
--
-- Value format 2: "v2 <reset generation> <fencing token> <position> <txn id>" (txn id may
-- be empty). Format 1 (no reset generation, read as generation 0): "<fencing token>
-- <position> <txn id>". A claim is ordered by (reset generation, fencing token): a group
-- reset (readergroup/core/group_state.py ResetGroup) bumps the generation, so a reader of
-- the reset group outranks every claim made before the reset, whatever its token, and a
-- reader from before the reset is refused by any claim made after it.
--
-- read_consumed(stored) -> generation, token, position, txn id (stored false: -1, -1, -1, "")
-- consumed_value(generation, token, position, txn id) -> the format 2 value
-- outranks(g1, t1, g2, t2) -> whether claim (g1, t1) is later than claim (g2, t2)
local function read_consumed(stored)
  if not stored then
    return -1, -1, -1, ''
  end
  local g, t, p, x = string.match(stored, '^v2 (%S+) (%S+) (%S+) ?(%S*)$')
  if g then
    return tonumber(g), tonumber(t), tonumber(p), x
  end
  local a, b, c = string.match(stored, '^(%S+) (%S+) ?(%S*)$')
  return 0, tonumber(a), tonumber(b), c
end

local function consumed_value(generation, token, position, txn)
  return 'v2 ' .. generation .. ' ' .. token .. ' ' .. position .. ' ' .. txn
end

local function outranks(g1, t1, g2, t2)
  return g1 > g2 or (g1 == g2 and t1 > t2)
end
