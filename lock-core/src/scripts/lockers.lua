-- Prepended to the scripts that wait for or free a lock: which processes to wake.
-- lockers  P{K}:lockers  sorted set: id of a Locker with tasks waiting for the lock ->
--                        when it started waiting (server clock, us); oldest first
-- A freed lock wakes one Locker, not every process that waits for it: the one waiting
-- longest that still listens. Its waiter then asks, and if someone else was quicker,
-- its Locker goes back in the set. The set runs out unless waiters keep asking.

-- Puts Locker `id` in the set, unless it is there already (keeping its place); `now_us`
-- is the server clock in microseconds, when the caller has read it already.
local function register(lockers, id, ttl_ms, now_us)
  if not now_us then
    local now = redis.call('TIME')
    now_us = now[1] * 1000000 + now[2]
  end
  redis.call('ZADD', lockers, 'NX', now_us, id)
  redis.call('PEXPIRE', lockers, ttl_ms)
end

-- Wakes the Locker that has waited longest and is still subscribed to its channel
-- (channel .. ':' .. id), other than `own` (the caller's, '' for none); the ones found
-- gone are dropped. Says whether one was woken.
local function wake_a_locker(lockers, channel, own)
  while true do
    local next = redis.call('ZPOPMIN', lockers)
    if #next == 0 then
      return false
    end
    if next[1] ~= own and redis.call('PUBLISH', channel .. ':' .. next[1], '') > 0 then
      return true
    end
  end
end


-- Wakes every Locker waiting for the lock, each with the message 'all' (every one of its
-- waiters, not one): a release that may let several in. The set is emptied; a Locker
-- whose waiters find the lock held again goes back in it.
local function wake_every_locker(lockers, channel)
  for _, id in ipairs(redis.call('ZRANGE', lockers, 0, -1)) do
    redis.call('PUBLISH', channel .. ':' .. id, 'all')
  end
  redis.call('DEL', lockers)
end
