-- Prepended to the scripts that release an exclusive lock, one call or a group of them:
-- frees it if, and only if, the caller owns it, and wakes one waiting Locker.
-- lock       P{K}
-- lockers    P{K}:lockers, the Lockers a release wakes
-- channel    P{K}:released, the stem of each Locker's wake-up channel (this, ':', its id)
-- holder     P{K}:holder_id, only for an owner that named itself (nil otherwise): it goes
--            too, announced on the channel of the same name
-- token      owner token
-- own        the caller's Locker ('' for none)
-- own_waits  '1' when tasks of the caller's Locker wait for the lock too
-- lockers_ms expiry of the waiting Lockers' set in milliseconds
-- Returns 1 when released, 0 when the caller was not the owner (nothing changed).
local function free_exclusive(lock, lockers, channel, holder, token, own, own_waits,
                              lockers_ms)
  if redis.call('GET', lock) ~= token then
    return 0
  end
  redis.call('DEL', lock)
  if holder then
    redis.call('DEL', holder)
    redis.call('PUBLISH', holder, '')
  end
  if wake_a_locker(lockers, channel, own) then
    if own_waits == '1' then
      -- Behind the others.
      register(lockers, own, lockers_ms)
    end
  elseif own_waits == '1' then
    redis.call('PUBLISH', channel .. ':' .. own, '')
  end
  return 1
end
