-- epoch.lua: prelude of append_events.lua and commit_staged.lua (prepended when loaded; not a
-- script on its own; needs time.lua's server_ms()). A segment's epochs tell readers which
-- log they read, as Kafka's leader epochs do (KIP-320).
--
-- Every entry id is "<offset + 1>-<epoch>". A new epoch begins whenever the server appending
-- to the segment is not the one that appended last (its INFO run_id differs from the meta
-- field `srv`): after a failover, a restart, a resharding. Its number is the server's clock in
-- ms (at least the previous epoch + 1), so an epoch begun on a primary that was lost later is
-- never numbered again by its successor; the meta field `epochs` records where each epoch
-- begins ("<epoch>:<first offset>," per epoch, oldest first: the surviving log's history),
-- and `ep` the current one. A reader that finds entries of an epoch it did not expect looks
-- the history up: offsets it read under an epoch that ends earlier in the history (or is not
-- in it) are gone, and the entries now at them are new (readergroup/core/epochs.py).
-- A restart that lost nothing only begins an epoch at the tail, which no reader is past.
--
-- this_server(given) -> the run_id of the server running the script: `given` when the client
--   passed it (it learnt it on the socket this call came over, which reaches one server
--   process for its whole life: readergroup/storage/server_identity.py), else asked of the
--   server (INFO server, a few kB of text built per call: once per connection, not per append)
-- segment_epoch(meta_key, epoch, server, tail, me) -> the epoch to append under, where `epoch`
--   and `server` are the meta fields `ep` and `srv` (false when absent), `tail` the offset
--   the append starts at and `me` this_server(); begins a new epoch when the server changed.
local function this_server(given)
  if given and given ~= '' then
    return given
  end
  return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
end

local function segment_epoch(meta_key, epoch, server, tail, me)
  local current = tonumber(epoch or 0)
  if server == me then
    return current
  end
  local new = math.max(current + 1, server_ms())
  local history = redis.call('HGET', meta_key, 'epochs') or ''
  redis.call('HSET', meta_key, 'ep', new, 'srv', me,
    'epochs', history .. string.format('%d:%d,', new, tail))
  return new
end
