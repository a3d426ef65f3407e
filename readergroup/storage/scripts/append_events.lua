-- append_events.lua: append a batch of events to one segment, atomically and idempotently.
--
-- Preludes: time.lua, epoch.lua.
--
-- KEYS[1]  segment meta hash (created_ms, sealed, events, bytes, head, t: server ms of the
--          last append; ep, srv, epochs: see epoch.lua)
-- KEYS[2]  segment event stream (entry id "<offset + 1>-<epoch>", epoch.lua)
-- KEYS[3]  segment writer table hash (writer id -> last batch sequence)
-- ARGV[1]  writer id
-- ARGV[2]  batch sequence number (increasing per writer; a retry re-sends the same one)
-- ARGV[3]  largest event allowed, bytes (payload plus packed headers)
-- ARGV[4]  n, the number of events
-- ARGV[5 .. 4 + 4n]  per event: routing key ("" for none, else "k" .. key), payload,
--                    writer timestamp (ms), headers packed with msgpack ("" for none;
--                    readergroup/core/headers.py)
-- ARGV[5 + 4n]  the highest tail this writer saw acknowledged in this segment (0: none)
-- ARGV[6 + 4n]  the segment's created_ms when it did ("": none)
-- ARGV[7 + 4n]  the run_id of the server this call runs on, as the client learnt it on this
--               connection ("" or absent: not known yet, the script asks INFO; epoch.lua)
-- ARGV[8 + 4n]  what to do about a stored tail behind it: "" record the loss, "report" return
--               REGRESSED; "replay": this batch is one the writer had acknowledged before at
--               ARGV[9 + 4n] (first offset) under the epoch ARGV[10 + 4n] at server ms
--               ARGV[11 + 4n] in the segment created at ARGV[12 + 4n], appended again after
--               a failover lost it (see below)
--
-- A stored tail behind what the writer saw acknowledged in the same incarnation of the
-- segment means Redis lost appends (a replica promoted before it had them). By default the
-- offsets in between are never used again: the tail moves up to what was seen, and the range
-- is recorded in the meta field `lost` ("<from>-<to>," per loss), so readers report it as lost
-- data instead of reading new events under offsets they already passed. With "report" the
-- script writes nothing and returns REGRESSED: the writer first appends again what it still
-- holds of its own acknowledged batches there ("replay"), then sends this batch with "".
--
-- A replay restores a lost batch exactly as it was: same entry ids (offsets and epoch), same
-- fields (t included), so a reader that had read it finds the log unchanged. It is appended
-- only where it was (the stored tail is its first offset), only in the same incarnation of the
-- segment (`created_ms`) and only if the segment's current epoch (meta `ep`) is the one it
-- was appended under: any ordinary append since began a new epoch, so no replay lands after
-- one. It begins no epoch (the next ordinary append on this server does, at the tail).
-- Otherwise it writes nothing and returns REGRESSED.
--
-- Each event is stored with fields k (routing key, only if any), h (packed headers, only if
-- any: an event without headers is stored exactly as before headers existed, and readers of
-- earlier versions, which decode other layouts by field name, ignore h), p (payload),
-- w (writer ms), t (server ms: server_ms() of the time.lua prelude, or the last append's if
-- TIME went back, so t never decreases along a segment), b (byte offset of the event in the
-- segment: payload bytes only). The same batch can also be appended without this script
-- (readergroup/storage/native_append.py); both keep these fields in this order.
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, first_offset, n, server_ms, created_ms}  appended at offsets first_offset ..
--                                    first_offset + n - 1 of the segment created at created_ms
--   {20, tail}                       the segment is sealed; nothing written
--   {2}                              the segment does not exist; nothing written
--   {3, index, size}                 event `index` (1-based) is too large (payload and
--                                    headers); nothing written
--   {6, last_sequence}               this batch already landed (a retry); nothing written
--   {8, tail, epoch}                 "report": the stored tail is behind what the writer saw;
--                                    "replay": the batch cannot go back where it was; nothing
--                                    written either way
-- The OK reply also carries, sixth, the epoch the batch was appended under and, seventh, the
-- server's run_id (ARGV[7 + 4n], or what INFO said), for the client to remember.
local meta = redis.call('HMGET', KEYS[1], 'created_ms', 'sealed', 'events', 'bytes', 't',
  'ep', 'srv')
if not meta[1] then
  return {2}
end
local events = tonumber(meta[3] or 0)
if meta[2] == '1' then
  return {20, events}
end
local last = redis.call('HGET', KEYS[3], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then
  -- rewritten (same value) so that a WAIT after this reply covers the earlier append too
  redis.call('HSET', KEYS[3], ARGV[1], last)
  return {6, tonumber(last)}
end
local n = tonumber(ARGV[4])
local limit = tonumber(ARGV[3])
for i = 1, n do
  local size = string.len(ARGV[2 + 4 * i]) + string.len(ARGV[4 + 4 * i])
  if size > limit then
    return {3, i, size}
  end
end
local mode = ARGV[8 + 4 * n] or ''
local current = tonumber(meta[6] or 0)
local epoch
local ms
local me = ARGV[7 + 4 * n] or ''
if mode == 'replay' then
  epoch = tonumber(ARGV[10 + 4 * n])
  if events ~= tonumber(ARGV[9 + 4 * n]) or current ~= epoch
      or meta[1] ~= ARGV[12 + 4 * n] then
    return {8, events, current}
  end
  ms = tonumber(ARGV[11 + 4 * n])
else
  local seen = tonumber(ARGV[5 + 4 * n] or 0) or 0
  if seen > events and meta[1] == ARGV[6 + 4 * n] then
    if mode == 'report' then
      return {8, events, current}
    end
    local lost = redis.call('HGET', KEYS[1], 'lost') or ''
    redis.call('HSET', KEYS[1], 'lost', lost .. events .. '-' .. seen .. ',')
    events = seen
  end
  me = this_server(ARGV[7 + 4 * n])
  epoch = segment_epoch(KEYS[1], meta[6], meta[7], events, me)
  ms = math.max(server_ms(), tonumber(meta[5] or 0))
end
local bytes = tonumber(meta[4] or 0)
for i = 1, n do
  local base = 4 * i
  local key = ARGV[base + 1]
  local payload = ARGV[base + 2]
  local headers = ARGV[base + 4]
  local id = string.format('%d-%d', events + i, epoch)
  if headers == '' then
    if key == '' then
      redis.call('XADD', KEYS[2], id, 'p', payload, 'w', ARGV[base + 3], 't', ms, 'b', bytes)
    else
      redis.call('XADD', KEYS[2], id, 'k', string.sub(key, 2), 'p', payload,
        'w', ARGV[base + 3], 't', ms, 'b', bytes)
    end
  elseif key == '' then
    redis.call('XADD', KEYS[2], id, 'h', headers, 'p', payload, 'w', ARGV[base + 3],
      't', ms, 'b', bytes)
  else
    redis.call('XADD', KEYS[2], id, 'k', string.sub(key, 2), 'h', headers, 'p', payload,
      'w', ARGV[base + 3], 't', ms, 'b', bytes)
  end
  bytes = bytes + string.len(payload)
end
redis.call('HSET', KEYS[1], 'events', events + n, 'bytes', bytes, 't',
  math.max(ms, tonumber(meta[5] or 0)))
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return {0, events, n, ms, meta[1], epoch, me}
