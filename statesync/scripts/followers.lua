-- followers.lua: prelude of append.lua and wake.lua (prepended when loaded; not a script on
-- its own). Named wake-ups go to each named follower's own wake stream, so a change wakes the
-- followers it concerns and no other (a reader of a hundred blocked on one shared stream
-- would be woken by every change).
--
-- wake_followers(wakers_key, first, names, wake_id, revision, ms, ttl) -> how many were woken
--   names: newline-separated followers; KEYS[first], KEYS[first + 1], ... are their wake
--   streams, in that order. Entry `wake_id` (field r = revision) is added to each stream
--   whose newest entry is older (trimmed to the newest 4; the stream expires `ttl` ms later);
--   wakers_key (sorted set) records each woken follower at server time `ms` and drops those
--   older than `ttl` ms (their streams have expired). Every call is a pcall: a stream ahead of
--   the log, or a key of the wrong type (left over, or written by hand), is skipped, never
--   failing the caller's write that already happened; the follower then wakes on its
--   periodic refresh instead.
local function wake_followers(wakers_key, first, names, wake_id, revision, ms, ttl)
  local index, woken = first, 0
  for follower in string.gmatch(names, '[^\n]+') do
    local key = KEYS[index]
    index = index + 1
    local added = redis.pcall('XADD', key, 'MAXLEN', 4, wake_id, 'r', revision)
    if type(added) ~= 'table' or not added.err then
      redis.pcall('PEXPIRE', key, ttl)
      redis.pcall('ZADD', wakers_key, ms, follower)
      woken = woken + 1
    end
  end
  if woken > 0 then
    redis.pcall('ZREMRANGEBYSCORE', wakers_key, '-inf', '(' .. (ms - ttl))
  end
  return woken
end
