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
-- Returns take_exclusive's reply.
return take_exclusive(KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
