-- commit_staged.lua: move staged events into their segments, all or nothing, once per job.
--
-- Preludes: time.lua, epoch.lua.
--
-- KEYS[1]            the jobs hash of the stream (job id -> committed server ms)
-- KEYS[2 .. 1+3n]    per target segment: meta hash, event stream, staging list
-- ARGV[1]            job id (a batch write, or "<writer id>:<batch id>" for streaming)
-- ARGV[2]            n, the number of target segments
--
-- A staging list holds, per event, three items: routing key ("" for none, else "k" .. key),
-- payload, writer timestamp (ms); or, for an event with headers, four: "h" .. that routing
-- key, payload, writer timestamp, headers packed with msgpack (readergroup/core/headers.py).
-- Events are appended exactly as append_events.lua would (field h, between k and p, only for
-- an event with headers).
--
-- Returns (status codes: readergroup/storage/segment_status.py):
--   {0, events}     committed now; the staging lists are deleted
--   {6, ms}         this job was committed before (a retry): nothing written
--   {20, index}     target segment `index` (1-based) is sealed: nothing written
--   {2, index}      target segment `index` does not exist: nothing written
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return {6, tonumber(redis.call('HGET', KEYS[1], ARGV[1]))}
end
local n = tonumber(ARGV[2])
for i = 1, n do
  local meta = redis.call('HMGET', KEYS[3 * i - 1], 'created_ms', 'sealed')
  if not meta[1] then
    return {2, i}
  end
  if meta[2] == '1' then
    return {20, i}
  end
end
local ms = server_ms()
local me = this_server(nil)
local total = 0
for i = 1, n do
  local meta_key, events_key, stage_key = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local meta = redis.call('HMGET', meta_key, 'events', 'bytes', 'ep', 'srv')
  local events = tonumber(meta[1] or 0)
  local bytes = tonumber(meta[2] or 0)
  local epoch = segment_epoch(meta_key, meta[3], meta[4], events, me)
  local staged = redis.call('LRANGE', stage_key, 0, -1)
  local j = 1
  while j + 2 <= #staged do
    local key, payload, writer_ms = staged[j], staged[j + 1], staged[j + 2]
    local headers = nil
    j = j + 3
    if string.sub(key, 1, 1) == 'h' then
      key, headers = string.sub(key, 2), staged[j]
      j = j + 1
    end
    events = events + 1
    local id = string.format('%d-%d', events, epoch)
    if headers then
      if key == '' then
        redis.call('XADD', events_key, id, 'h', headers, 'p', payload, 'w', writer_ms,
          't', ms, 'b', bytes)
      else
        redis.call('XADD', events_key, id, 'k', string.sub(key, 2), 'h', headers,
          'p', payload, 'w', writer_ms, 't', ms, 'b', bytes)
      end
    elseif key == '' then
      redis.call('XADD', events_key, id, 'p', payload, 'w', writer_ms, 't', ms, 'b', bytes)
    else
      redis.call('XADD', events_key, id, 'k', string.sub(key, 2), 'p', payload,
        'w', writer_ms, 't', ms, 'b', bytes)
    end
    bytes = bytes + string.len(payload)
    total = total + 1
  end
  redis.call('HSET', meta_key, 'events', events, 'bytes', bytes)
  redis.call('DEL', stage_key)
end
redis.call('HSET', KEYS[1], ARGV[1], ms)
return {0, total}
