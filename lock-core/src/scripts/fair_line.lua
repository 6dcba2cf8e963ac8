-- Prepended to the fair lock's scripts: its line of waiters, and handing the lock over to
-- the first in it. The fair lock's key is the exclusive lock's (a string holding the
-- owner's token, set with a lease), so fair and exclusive holds of one key exclude each
-- other. Waiters queue in Redis; a release hands the lock straight to the first waiter in
-- line whose place has not run out, and tells its Locker alone, on the Locker's own
-- channel, so it need not ask again.
-- Every fair script gets the same KEYS:
-- KEYS[1] lock key        P{K}
-- KEYS[2] fence counter   P{K}:fence
-- KEYS[3] line            P{K}:queue     list of waiting tokens, first come first
-- KEYS[4] places          P{K}:places    hash: token -> "<runs out, server us>:<lease ms>:<locker>"
-- KEYS[5] channel         P{K}:released  (a hand-over goes to P{K}:released:<locker>)
-- KEYS[6] waiting Lockers P{K}:lockers   (so that an exclusive release wakes fair waiters too)
local lock, counter, line, places, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- The first waiter in line whose place has not run out, taken out of the line, with its
-- lease and its Locker (whoever is found gets the lock); the waiters ahead of it, gone or
-- out of time, are dropped.
local function next_in_line()
  while true do
    local head = redis.call('LPOP', line)
    if not head then
      return nil
    end
    local place = redis.call('HGET', places, head)
    redis.call('HDEL', places, head)
    if place then
      local expires, lease, locker = string.match(place, '^(%d+):(%d+):(%x+)$')
      if expires and tonumber(expires) > now then
        return head, lease, locker
      end
    end
  end
end

-- Makes `owner` the holder for `lease` ms and draws its fencing token; the counter is kept
-- for `fence_ttl` ms, and at least as long as the lease.
local function take(owner, lease, fence_ttl)
  redis.call('SET', lock, owner, 'PX', lease)
  return draw_fence(counter, math.max(tonumber(fence_ttl), tonumber(lease)))
end

-- Gives the lock to the waiter taken out of the line and tells its Locker, with its token
-- and the server time (from which it reckons its lease).
local function hand_over(head, lease, locker, fence_ttl)
  local fence = take(head, lease, fence_ttl)
  redis.call('PUBLISH', channel .. ':' .. locker, string.format('%s %d %d', head, fence, now))
end

-- If `token` holds the lock, hands it to the next in line or, with nobody in line, frees
-- it and wakes the Locker that has waited longest (exclusive waiters wait in line
-- nowhere). Returns 1 when `token` held it, 0 otherwise (nothing changed).
local function release(token, fence_ttl)
  if redis.call('GET', lock) ~= token then
    return 0
  end
  local head, lease, locker = next_in_line()
  if head then
    hand_over(head, lease, locker, fence_ttl)
  else
    redis.call('DEL', lock)
    wake_a_locker(KEYS[6], channel, '')
  end
  return 1
end

