-- Prepended to the scripts that keep or read a holder id: what the owner of an exclusive
-- lock calls itself (an election candidate's id), kept beside the lock key, which holds
-- the owner's token alone.
-- key  P{K}:holder_id  the owner's token, a newline, then the id; set with the lock and
--                      given the same expiry, renewed and deleted with it
-- One left behind (an acquire cut short, a lease that ran out) names a token that no
-- longer holds the lock, and is never read as the holder's.
-- Each owner that names itself is announced on the channel of the same name, for the
-- followers of an election, as its release is (release.lua, force_unlock.lua).

local function keep_holder_id(key, token, id, lease_ms)
  redis.call('SET', key, token .. '\n' .. id, 'PX', lease_ms)
  redis.call('PUBLISH', key, '')
end

-- The id kept for `owner`, the lock key's token; nil if it named itself nothing.
local function holder_id_of(key, owner)
  local kept = redis.call('GET', key)
  local prefix = owner .. '\n'
  if kept and string.sub(kept, 1, #prefix) == prefix then
    return string.sub(kept, #prefix + 1)
  end
  return nil
end

