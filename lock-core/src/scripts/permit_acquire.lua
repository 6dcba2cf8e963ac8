-- Take a permit of a semaphore, or find them all taken. The count is stored on first use
-- and kept, from the last acquire, as long as the fence counter.
-- KEYS[1] lock key        P{K}: 'semaphore' while permits are held
-- KEYS[2] fence counter   P{K}:fence
-- KEYS[3] holders         P{K}:holders   sorted set: token -> lease end (server ms)
-- KEYS[4] count           P{K}:permits
-- KEYS[5] waiting Lockers P{K}:lockers
-- ARGV[1] owner token (one per acquisition)
-- ARGV[2] lease in milliseconds
-- ARGV[3] expiry of the fence counter in milliseconds
-- ARGV[4] the count the caller asks with
-- ARGV[5] the caller's Locker, to wake when a permit may be free ('': it will not wait)
-- ARGV[6] expiry of the waiting Lockers' set in milliseconds
-- Returns {1, fencing token} when the caller holds a permit; {0, the longest lease left
-- in ms} when it must wait; {-1, the stored count} when that is not the caller's.
local lock, holders, count_key = KEYS[1], KEYS[3], KEYS[4]
local owner = redis.call('GET', lock)
local count = tonumber(redis.call('GET', count_key)) or tonumber(ARGV[4])
if count ~= tonumber(ARGV[4]) then
  return {-1, count}
end
redis.call('SET', count_key, count, 'PX', ARGV[3])
local now_ms = clock_ms()
prune(holders, now_ms)
-- A retried attempt finds its token there already: it takes no second permit.
if admits(owner, {mark = 'semaphore', holders = holders, count = count})
    or (owner == 'semaphore' and redis.call('ZSCORE', holders, ARGV[1])) then
  redis.call('ZADD', holders, now_ms + tonumber(ARGV[2]), ARGV[1])
  stretch(lock, holders, 'semaphore', now_ms)
  return {1, draw_fence(KEYS[2], ARGV[3])}
end
if ARGV[5] ~= '' then
  register(KEYS[5], ARGV[5], ARGV[6])
end
return {0, redis.call('PTTL', lock)}
