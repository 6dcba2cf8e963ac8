-- Reset a lock's lease if, and only if, the caller owns it. Never creates the key, so a
-- late renewal cannot revive a released lock.
-- KEYS[1] lock key   P{K}
-- ARGV[1] owner token
-- ARGV[2] new lease in milliseconds
-- Returns 1 when extended, 0 when the caller was not the owner (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
