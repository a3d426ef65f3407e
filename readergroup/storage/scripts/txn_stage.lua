-- txn_stage.lua: stage events of an open transaction (never in a segment), renewing its
-- lease; or, with "decide", stage the last events and decide the commit.
--
-- Preludes: time.lua, consumed.lua.
--
-- KEYS[1]  the transaction's record (hash)
-- KEYS[2]  its staging list: one item per stage call holding that call's events, packed
--          with msgpack by the client (readergroup/storage/txn_store.py), in write order
-- KEYS[3]  the stream's open transactions (sorted set: id -> deadline, server ms)
-- KEYS[4]  the stream's transactional id epochs (hash: transactional id -> epoch)
-- KEYS[5]  the stream's transactions (sorted set: id -> created, or finished, server ms)
-- KEYS[6]  "decide" with consumed positions only: the consumed positions
--          (hash: "<group sync name>@<group created ms>|<scope>/<stream>/<segment>" of the input ->
--          "v2 <reset generation> <fencing token> <position> <txn id>"; consumed.lua)
-- ARGV[1]  transaction id
-- ARGV[2]  the caller: "<epoch>:<transactional id>"
-- ARGV[3]  retention past the deadline, ms: the Redis TTL of the record and the staging
--          list while open (a decision removes both TTLs; a finish sets the record's)
-- ARGV[4]  n, the number of events (0: none, only a lease renewal or a decision)
-- ARGV[5]  their payload bytes
-- ARGV[6]  the events, packed ("" when n is 0)
-- ARGV[7]  "" to stage only; "decide" to decide the commit after staging, then:
-- ARGV[8]  the events the plan covers (must be all staged events, these included)
-- ARGV[9]  the commit plan (JSON, readergroup/core/transactions.py CommitPlan)
-- ARGV[10] the consume-transform-produce positions (JSON, "" for none)
-- ARGV[11] how long after the decision a completer not finished is taken for dead, ms
-- ARGV[12] m, the number of consumed positions (0 for none)
-- ARGV[13] the reader group's reset generation the reader read them under (m > 0)
-- ARGV[14 ..] per position: the input segment's field, the reader's fencing token of it,
--          the position
--
-- A decision with consumed positions claims each input segment for the reader's (reset
-- generation, token): if a later claim is there (another reader acquired it since, or the
-- group was reset since), the transaction is aborted here and nothing of it lands
-- ({26, field}).
--
-- Stages only while OPEN (else {23, state}), by the epoch holding the record while that is
-- still its transactional id's current epoch (else {22}), before the deadline (else the
-- transaction is aborted here: state ABORTED, staging list deleted, {24}). Each call renews
-- the lease (deadline = now + lease).
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, events, deadline_ms}   staged (events: the transaction's total so far)
--   {0, events, decided_ms}    "decide": COMMITTING with that plan
--   {1, events}                "decide": the plan does not cover the staged events (events:
--                              how many there are); the events of this call not staged
--   {22}                       fenced: nothing staged
--   {23, state}                not open: nothing staged
--   {24}                       expired (aborted now): nothing staged
--   {25}                       no such transaction
--   {26, field}                "decide": the reader lost that input segment: aborted now
local record = redis.call('HMGET', KEYS[1], 'state', 'tid', 'epoch', 'deadline', 'lease',
  'events', 'bytes')
if not record[1] then
  return {25}
end
if record[1] ~= 'OPEN' then
  return {23, record[1]}
end
if ARGV[2] ~= record[3] .. ':' .. record[2]
    or redis.call('HGET', KEYS[4], record[2]) ~= record[3] then
  return {22}
end
local now = server_ms()
local function abort()
  redis.call('HSET', KEYS[1], 'state', 'ABORTED', 'finished', now)
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[5], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
end
if now > tonumber(record[4]) then
  abort()
  return {24}
end
local n = tonumber(ARGV[4])
local events = tonumber(record[6]) + n
local bytes = tonumber(record[7]) + tonumber(ARGV[5])
local decide = ARGV[7] == 'decide'
local claims = {}
if decide then
  if events ~= tonumber(ARGV[8]) then
    return {1, tonumber(record[6])}
  end
  local generation = tonumber(ARGV[13])
  local at = 14
  for i = 1, tonumber(ARGV[12]) do
    local field, token = ARGV[at], tonumber(ARGV[at + 1])
    local held_generation, held = read_consumed(redis.call('HGET', KEYS[6], field))
    if outranks(held_generation, held, generation, token) then
      abort()
      return {26, field}
    end
    claims[#claims + 1] = field
    claims[#claims + 1] = consumed_value(generation, token, ARGV[at + 2], ARGV[1])
    at = at + 3
  end
end
if n > 0 then
  redis.call('RPUSH', KEYS[2], ARGV[6])
end
if decide then
  redis.call('HSET', KEYS[1], 'state', 'COMMITTING', 'events', events, 'bytes', bytes,
    'plan', ARGV[9], 'pv', 1, 'positions', ARGV[10], 'decided', now)
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[11]), ARGV[1])
  redis.call('PERSIST', KEYS[2])
  redis.call('PERSIST', KEYS[1])
  if #claims > 0 then
    redis.call('HSET', KEYS[6], unpack(claims))
  end
  return {0, events, now}
end
local deadline = now + tonumber(record[5])
redis.call('HSET', KEYS[1], 'events', events, 'bytes', bytes, 'deadline', deadline)
redis.call('ZADD', KEYS[3], deadline, ARGV[1])
redis.call('PEXPIRE', KEYS[1], deadline - now + tonumber(ARGV[3]))
if n > 0 or redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[2], deadline - now + tonumber(ARGV[3]))
end
return {0, events, deadline}
