-- Release an exclusive lock if, and only if, the caller owns it, and wake one waiting
-- Locker.
-- KEYS[1] lock key          P{K}
-- KEYS[2] waiting Lockers   P{K}:lockers
-- KEYS[3] release channel   P{K}:released (a Locker's own: this, ':', its id)
-- KEYS[4] holder id         P{K}:holder_id, only for an owner that named itself: it goes
--                           too, announced on the channel of the same name
-- ARGV[1] owner token
-- ARGV[2] the caller's Locker ('' for none)
-- ARGV[3] '1' when tasks of the caller's Locker wait for the lock too
-- ARGV[4] expiry of the waiting Lockers' set in milliseconds
-- Returns 1 when released, 0 when the caller was not the owner (nothing changed).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[4] then
  redis.call('DEL', KEYS[4])
  redis.call('PUBLISH', KEYS[4], '')
end
local own, own_waits = ARGV[2], ARGV[3] == '1'
if wake_a_locker(KEYS[2], KEYS[3], own) then
  if own_waits then
    -- Behind the others.
    register(KEYS[2], own, ARGV[4])
  end
elseif own_waits then
  redis.call('PUBLISH', KEYS[3] .. ':' .. own, '')
end
return 1
