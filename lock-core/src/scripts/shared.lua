-- Prepended to the scripts of shared holds: the readers of a read-write lock, the permit
-- holders of a semaphore. Their holders are a sorted set, token -> when its lease runs out
-- (server clock, ms), so each has its own lease and none needs a sweeper: a lease that
-- ran out is dropped by the next script that looks. While they hold it, the lock key P{K}
-- holds the sharing's mark ('read' or 'semaphore') for as long as the longest lease, so
-- that exclusive, fair and write holds, which set P{K} to their token, wait for them and
-- they for those.

-- The server clock in milliseconds.
local function clock_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- Drops the holders whose lease ran out by `now_ms`.
local function prune(holders, now_ms)
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_ms)
end

-- Marks the lock key with `mark` and makes it and the holders' set last as long as the
-- longest lease left; with no holder left, deletes both. Says whether anyone holds it.
local function stretch(lock, holders, mark, now_ms)
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', lock, holders)
    return false
  end
  local left = math.max(tonumber(last[2]) - now_ms, 1)
  redis.call('SET', lock, mark, 'PX', left)
  redis.call('PEXPIRE', holders, left)
  return true
end
