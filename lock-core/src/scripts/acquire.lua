-- Take an exclusive lock and draw its fencing token, in one round trip.
-- KEYS[1] lock key        P{K}
-- KEYS[2] fence counter   P{K}:fence
-- KEYS[3] waiting Lockers P{K}:lockers
-- KEYS[4] holder id       P{K}:holder_id, only for a caller that names itself
-- ARGV[1] owner token (uuid v4, one per acquisition)
-- ARGV[2] lease in milliseconds
-- ARGV[3] expiry of the fence counter in milliseconds (renewed every 64 tokens)
-- ARGV[4] the caller's Locker, to wake when the lock is freed ('': the caller will not wait)
-- ARGV[5] expiry of the waiting Lockers' set in milliseconds
-- ARGV[6] the caller's holder id, only with KEYS[4] (the fence seed is always last)
-- Returns {1, fencing token} when the caller holds the lock; {0, the holder's lease left in
-- ms} when someone else does (-1: a holder with no lease).
local lock, token = KEYS[1], ARGV[1]
-- Set only if nobody holds it, answering who did: admits' whole rule for this kind.
local owner = redis.call('SET', lock, token, 'NX', 'PX', ARGV[2], 'GET')
if admits(owner) then
  if KEYS[4] then
    keep_holder_id(KEYS[4], token, ARGV[6], ARGV[2])
  end
  return {1, draw_fence(KEYS[2], ARGV[3])}
end
if owner == token then
  -- This same acquisition, retried because the connection died before its reply came:
  -- the first attempt went through, and its token is the counter's current value.
  redis.call('PEXPIRE', lock, ARGV[2])
  if KEYS[4] then
    keep_holder_id(KEYS[4], token, ARGV[6], ARGV[2])
  end
  return {1, current_fence(KEYS[2], ARGV[3])}
end
if ARGV[4] ~= '' then
  register(KEYS[3], ARGV[4], ARGV[5])
end
return {0, redis.call('PTTL', lock)}
