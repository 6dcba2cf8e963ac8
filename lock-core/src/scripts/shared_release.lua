-- Release a shared hold (a read, or a semaphore permit) if the caller holds it. The last
-- reader to go wakes the writer that has waited longest (and any other waiter but the
-- writers); a permit wakes one waiting Locker.
-- KEYS[1] lock key          P{K}
-- KEYS[2] holders           P{K}:readers or P{K}:holders
-- KEYS[3] waiting Lockers   P{K}:lockers
-- KEYS[4] release channel   P{K}:released (a Locker's own: this, ':', its id)
-- KEYS[5] waiting writers   P{K}:writers (of a read-write lock)
-- ARGV[1] the holder's token
-- ARGV[2] the sharing's mark: 'read' or 'semaphore'
-- Returns 1 when released, 0 when the caller did not hold it (its lease ran out).
local lock, holders, mark = KEYS[1], KEYS[2], ARGV[2]
if redis.call('GET', lock) ~= mark then
  return 0
end
local now_ms = clock_ms()
prune(holders, now_ms)
if redis.call('ZREM', holders, ARGV[1]) == 0 then
  return 0
end
local still_held = stretch(lock, holders, mark, now_ms)
if mark == 'semaphore' then
  wake_a_locker(KEYS[3], KEYS[4], '')
elseif not still_held then
  wake_after_write(KEYS[3], KEYS[4], KEYS[5])
end
return 1
