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

-- Wakes, after a write or the last read was released, every waiting Locker's waiters but
-- its writers (the message 'readers': every reader may go in), and the writer that has
-- waited longest, alone ('writer <token>' on its Locker's channel). The set of Lockers is
-- emptied, as above. The waiting writers are the hash `writers`: token ->
-- "<began to ask>:<place runs out>:<its Locker>" (server ms); those out of time are dropped.
local function wake_after_write(lockers, channel, writers)
  for _, id in ipairs(redis.call('ZRANGE', lockers, 0, -1)) do
    redis.call('PUBLISH', channel .. ':' .. id, 'readers')
  end
  redis.call('DEL', lockers)
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local next, next_since, next_locker
  local waiting = redis.call('HGETALL', writers)
  for i = 1, #waiting, 2 do
    local since, place, locker = string.match(waiting[i + 1], '^(%d+):(%d+):(%x*)$')
    if not place or tonumber(place) <= now_ms then
      redis.call('HDEL', writers, waiting[i])
    elseif not next or tonumber(since) < next_since then
      next, next_since, next_locker = waiting[i], tonumber(since), locker
    end
  end
  -- (A writer whose Locker has no wake-ups, '', polls.)
  if next and next_locker ~= '' then
    redis.call('PUBLISH', channel .. ':' .. next_locker, 'writer ' .. next)
  end
end
