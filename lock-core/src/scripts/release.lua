-- Release a lock if, and only if, the caller owns it, and wake its waiters.
-- KEYS[1] lock key          P{N}
-- KEYS[2] release channel   P{N}:released
-- ARGV[1] owner token
-- Returns 1 when released, 0 when the caller was not the owner (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], '')
  return 1
end
return 0
