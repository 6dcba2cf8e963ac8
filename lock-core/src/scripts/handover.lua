-- Hand an exclusive lock from its holder straight to a task of the same Locker that waits
-- for it: the owner changes and the waiter's fencing token is drawn in one round trip,
-- where a release and the waiter's next attempt would take two.
-- KEYS[1] lock key        P{K}
-- KEYS[2] fence counter   P{K}:fence
-- ARGV[1] holder's token
-- ARGV[2] waiter's token
-- ARGV[3] waiter's lease in milliseconds
-- ARGV[4] expiry of the fence counter in milliseconds (renewed every 64 tokens)
-- Returns the waiter's fencing token; nil when the caller did not hold the lock (nothing
-- changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return draw_fence(KEYS[2], ARGV[4])
end
return false
