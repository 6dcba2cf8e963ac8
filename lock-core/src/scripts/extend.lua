-- Reset a hold's lease if, and only if, the caller holds it. Never creates a key, so a
-- late renewal cannot revive a released lock.
-- KEYS[1] lock key   P{K}
-- KEYS[2] holders    P{K}:readers or P{K}:holders for a shared hold; the lock key again
--                    (unused) for the others
-- KEYS[3] holder id  P{K}:holder_id, only for an exclusive owner that named itself: its
--                    expiry is reset too
-- ARGV[1] owner token
-- ARGV[2] new lease in milliseconds
-- ARGV[3] '' for an exclusive, fair or write hold; else the sharing's mark ('read' or
--         'semaphore') of a shared one
-- Returns 1 when extended, 0 when the caller did not hold it (nothing changed).
local lock, token, lease, mark = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if mark == '' then
  if redis.call('GET', lock) == token then
    if KEYS[3] then
      redis.call('PEXPIRE', KEYS[3], lease)
    end
    return redis.call('PEXPIRE', lock, lease)
  end
  return 0
end
if redis.call('GET', lock) ~= mark then
  return 0
end
local now_ms = clock_ms()
local ends = tonumber(redis.call('ZSCORE', KEYS[2], token))
if not ends or ends <= now_ms then
  return 0
end
redis.call('ZADD', KEYS[2], now_ms + tonumber(lease), token)
stretch(lock, KEYS[2], mark, now_ms)
return 1
