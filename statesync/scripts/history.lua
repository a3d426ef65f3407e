-- history.lua: prelude of append.lua, read.lua and compact.lua (prepended when loaded; not
-- a script on its own). The log's history is a chain of hashes: revision 0 has the
-- incarnation id, and the entry at revision r has sha1hex(history(r - 1) .. payload(r)),
-- stored in its field `h`; the meta hash keeps the head's (`hash`), the newest snapshot's
-- (`snaph`) and the truncation point's (`trunch`). Two logs that agree on the history at a
-- revision agree on every entry up to it.
--
-- load_meta(meta_key) -> nil when the synchronizer does not exist, else a table
--   {head, inc, hash, snap, snaph, trunc, trunch} (hash fields false on a log written before
--   histories existed)
-- history_at(log_key, meta, revision) -> the history at `revision`, or false when it is not
--   known any more (truncated away, past the head, or from before histories)
local function load_meta(meta_key)
  local v = redis.call('HMGET', meta_key, 'revision', 'inc', 'hash', 'snap', 'snaph', 'trunc',
    'trunch')
  if not v[1] then
    return nil
  end
  return {head = tonumber(v[1]), inc = v[2], hash = v[3], snap = tonumber(v[4]), snaph = v[5],
    trunc = tonumber(v[6]), trunch = v[7]}
end

local function history_at(log_key, meta, revision)
  if not meta.hash or revision < meta.trunc or revision > meta.head then
    return false
  end
  if revision == meta.head then
    return meta.hash
  end
  if revision == meta.snap then
    return meta.snaph
  end
  if revision == meta.trunc then
    return meta.trunch
  end
  local id = string.format('%d-0', revision)
  local found = redis.call('XRANGE', log_key, id, id)
  if #found == 0 then
    return false
  end
  local fields = found[1][2]
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'h' then
      return fields[i + 1]
    end
  end
  return false
end
