-- Take an exclusive lock and draw its fencing token, in one round trip.
-- KEYS[1] lock key        P{N}
-- KEYS[2] fence counter   P{N}:fence
-- KEYS[3] waiting Lockers P{N}:lockers
-- ARGV[1] owner token (uuid v4, one per acquisition)
-- ARGV[2] lease in milliseconds
-- ARGV[3] expiry of the fence counter in milliseconds (renewed every 64 tokens)
-- ARGV[4] the caller's Locker, to wake when the lock is freed ('': the caller will not wait)
-- ARGV[5] expiry of the waiting Lockers' set in milliseconds
-- Returns one integer (cheaper to send and parse than a pair): the fencing token (always
-- positive) when acquired; when held, -1 - the holder's lease left in ms, or 0 when the
-- holder has no lease.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return draw_fence(KEYS[2], ARGV[3])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- This same acquisition, retried because the connection died before its reply came:
  -- the first attempt went through, and its token is the counter's current value.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return current_fence(KEYS[2], ARGV[3])
end
if ARGV[4] ~= '' then
  register(KEYS[3], ARGV[4], ARGV[5])
end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
  return 0
end
return -1 - left
