-- append.lua: append one entry to a synchronizer's log, conditionally and idempotently,
-- only from a writer whose replica belongs to the log's incarnation and history.
-- Preludes: time.lua, history.lua, followers.lua.
--
-- KEYS[1]  meta hash        KEYS[2]  log stream        KEYS[3]  writer table hash
-- KEYS[4]  wake stream (optional: absent, no wake-up is written)
-- KEYS[5]  wakers sorted set (with named wake-ups: ARGV[11] '1')
-- KEYS[6..] the wake streams of the followers named in ARGV[12], in that order
-- ARGV[1]  expected head revision, or -1 for an unconditional append
-- ARGV[2]  entry payload (opaque bytes)
-- ARGV[3]  largest payload allowed, in bytes
-- ARGV[4]  writer id
-- ARGV[5]  writer's sequence number for this append (1, 2, ...; a retry reuses it)
-- ARGV[6]  incarnation id the writer's replica was loaded from ('': not checked)
-- ARGV[7]  revision of the writer's replica (-1: none); for a conditional append, ARGV[1]
-- ARGV[8]  the writer's history at ARGV[7] ('': not checked)
-- ARGV[9]  '1': the entry wakes followers: entry `<revision>-0` is added to KEYS[4] too
--          (trimmed to the newest 16); '0' or absent: it does not
-- ARGV[10] what the entry concerns: keys separated by newlines, stored in the entry's field
--          `k`; '' or absent: the whole state. A conditional append with keys also lands
--          when the head moved past ARGV[1], provided every entry after ARGV[1] (at most 256,
--          none truncated) has keys and none of them is one of ARGV[10]'s
-- ARGV[11] '1': the wake-up is only for the followers named in ARGV[12] (newline-separated;
--          none: no wake-up), decided on the writer's replica: entry `<revision>-0` goes to
--          each one's wake stream (KEYS[6..], trimmed to the newest 4, expiring ARGV[13] ms
--          after), not to KEYS[4], and KEYS[5] records them (follower -> server ms; those
--          older than ARGV[13] ms dropped). When the entry does not land right after that
--          replica (ARGV[7] is not the head, or ARGV[8] not its history), the writer names
--          them again on the state it reads next (wake.lua). '0' or absent: the wake-up is
--          for every follower (KEYS[4])
-- ARGV[13] time to live of the followers' wake streams, ms (with ARGV[11] '1')
--
-- Returns:
--   {0, revision, server_ms, history}   appended as entry `revision` stamped with server time
--                              (past ARGV[1] + 1 only for keys no entry since concerned)
--   {1, head}                  conflict: the head is not ARGV[1] (and, with keys, an entry
--                              since concerns the whole state or one of the keys); nothing
--                              written
--   {2}                        the synchronizer does not exist; nothing written
--   {3, size, limit}           payload too large; nothing written
--   {6, revision}              this writer's sequence already landed at `revision`
--                              (a retry of an append whose reply was lost); nothing written
--   {8, head, kind}            the writer's replica is not of this log: kind 0, another
--                              incarnation (deleted and created again); kind 1, another
--                              history (the log lost entries the writer applied); nothing
--                              written
local MAX_WINDOW = 256

local meta = load_meta(KEYS[1])
if not meta then
  return {2}
end
local head = meta.head
local sequence = tonumber(ARGV[5])
local last = redis.call('HGET', KEYS[3], ARGV[4])
if last then
  local last_seq, last_rev = string.match(last, '^(%d+) (%d+)$')
  if tonumber(last_seq) >= sequence then
    -- rewritten (same value) so that a WAIT after this reply covers the earlier append too
    redis.call('HSET', KEYS[3], ARGV[4], last)
    return {6, tonumber(last_rev)}
  end
end
if ARGV[6] ~= '' and meta.inc ~= ARGV[6] then
  return {8, head, 0}
end
local anchor = tonumber(ARGV[7])
if anchor > head then
  return {8, head, 1}
end
local expected = tonumber(ARGV[1])
local keys = ARGV[10] or ''
if expected >= 0 and expected ~= head then
  -- a keyed append lands past entries that all concern other keys
  local disjoint = keys ~= '' and expected >= meta.trunc and head - expected <= MAX_WINDOW
  if disjoint then
    local mine = {}
    for key in string.gmatch(keys, '[^\n]+') do
      mine[key] = true
    end
    local entries = redis.call('XRANGE', KEYS[2], string.format('%d-0', expected + 1), '+')
    disjoint = #entries == head - expected
    for _, entry in ipairs(entries) do
      if not disjoint then
        break
      end
      local fields = entry[2]
      local touched = false
      for i = 1, #fields - 1, 2 do
        if fields[i] == 'k' then
          touched = fields[i + 1]
        end
      end
      if not touched then
        disjoint = false
      else
        for key in string.gmatch(touched, '[^\n]+') do
          if mine[key] then
            disjoint = false
          end
        end
      end
    end
  end
  if not disjoint then
    return {1, head}
  end
end
if ARGV[8] ~= '' and anchor >= 0 then
  local known = history_at(KEYS[2], meta, anchor)
  if known and known ~= ARGV[8] then
    return {8, head, 1}
  end
end
local size = string.len(ARGV[2])
if size > tonumber(ARGV[3]) then
  return {3, size, tonumber(ARGV[3])}
end
local ms = server_ms()
local revision = head + 1
local history = redis.sha1hex((meta.hash or meta.inc or '') .. ARGV[2])
if keys ~= '' then
  redis.call('XADD', KEYS[2], string.format('%d-0', revision), 'd', ARGV[2], 't', ms,
    'h', history, 'k', keys)
else
  redis.call('XADD', KEYS[2], string.format('%d-0', revision), 'd', ARGV[2], 't', ms,
    'h', history)
end
redis.call('HSET', KEYS[1], 'revision', revision, 'hash', history)
redis.call('HSET', KEYS[3], ARGV[4], string.format('%d %d', sequence, revision))
if KEYS[4] and ARGV[9] == '1' then
  -- pcall: a wake stream ahead of the log (left over, or written by hand) must not fail the
  -- append that already landed; followers then wake on their periodic refresh instead
  local wake_id = string.format('%d-0', revision)
  if ARGV[11] == '1' then
    wake_followers(KEYS[5], 6, ARGV[12], wake_id, revision, ms, tonumber(ARGV[13]))
  else
    redis.pcall('XADD', KEYS[4], 'MAXLEN', 16, wake_id, 'r', revision)
  end
end
return {0, revision, ms, history}
