-- The fair lock: first come, first served. Its lock key is the plain lock's (a string
-- holding the owner's token, set with a lease), so fair and plain holds of one name
-- exclude each other. Waiters queue in Redis; a release hands the lock straight to the
-- first waiter in line whose place has not run out, and tells its Locker alone, on the
-- Locker's own channel, so it need not ask again.
-- KEYS[1] lock key        P{N}
-- KEYS[2] fence counter   P{N}:fence
-- KEYS[3] line            P{N}:queue     list of waiting tokens, first come first
-- KEYS[4] places          P{N}:waiters   hash: token -> "<runs out, server us>:<lease ms>:<locker>"
-- KEYS[5] channel         P{N}:released  (a hand-over goes to P{N}:released:<locker>)
-- KEYS[6] waiting Lockers P{N}:lockers   (so that a plain release wakes fair waiters too)
-- ARGV[1] 'acquire', 'release', or 'leave' (stop waiting; give the lock back if handed over)
-- ARGV[2] the caller's token
-- ARGV[3] the caller's lease in milliseconds (acquire)
-- ARGV[4] expiry of the fence counter in milliseconds (a hand-over draws a token too)
-- ARGV[5] how long the caller's place in line lasts, in milliseconds; 0: do not queue (acquire)
-- ARGV[6] expiry of the line's keys and of the waiting Lockers' set in milliseconds,
--         longer than any place (acquire)
-- ARGV[7] the caller's Locker: a hex id naming the channel of its hand-overs (acquire)
-- Returns, for 'acquire': {1, fence, lease left in ms} when the caller holds the lock (taken
-- now, or handed to it earlier); {0, pttl of the holder, server time in us} when it waits.
-- For 'release' and 'leave': 1 when the caller held the lock (now passed on), 0 otherwise.
-- A hand-over publishes "<token> <fence> <server time in us>" on the waiter's Locker's
-- channel; a release that finds nobody in line frees the lock and, as the plain release
-- does, wakes the Locker that has waited longest (plain waiters wait in line nowhere).
local lock, counter, line, places, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, token = ARGV[1], ARGV[2]
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

local function take(owner, lease)
  redis.call('SET', lock, owner, 'PX', lease)
  return draw_fence(counter, math.max(tonumber(ARGV[4]), tonumber(lease)))
end

-- Gives the lock to the waiter taken out of the line and tells its Locker, with its token
-- and the server time (from which it reckons its lease).
local function hand_over(head, lease, locker)
  local fence = take(head, lease)
  redis.call('PUBLISH', channel .. ':' .. locker, string.format('%s %d %d', head, fence, now))
end

if op == 'acquire' then
  local owner = redis.call('GET', lock)
  if owner == token then
    -- Handed over to the caller, whose message went astray; or this same attempt,
    -- retried because the connection died before its reply came.
    return {1, current_fence(counter, ARGV[4]), redis.call('PTTL', lock)}
  end
  if not owner then
    local head, lease, locker = next_in_line()
    if not head or head == token then
      return {1, take(token, ARGV[3]), tonumber(ARGV[3])}
    end
    -- Free (its holder's lease ran out, or a plain release freed it) with someone
    -- ahead of the caller: it is theirs.
    hand_over(head, lease, locker)
  end
  local place = tonumber(ARGV[5])
  if place > 0 then
    local entry = string.format('%d:%s:%s', now + place * 1000, ARGV[3], ARGV[7])
    if redis.call('HSET', places, token, entry) == 1 then
      redis.call('RPUSH', line, token)
    end
    redis.call('PEXPIRE', line, ARGV[6])
    redis.call('PEXPIRE', places, ARGV[6])
    register(KEYS[6], ARGV[7], ARGV[6], now)
  end
  return {0, redis.call('PTTL', lock), now}
end

if op == 'leave' then
  redis.call('LREM', line, 1, token)
  redis.call('HDEL', places, token)
end
if redis.call('GET', lock) ~= token then
  return 0
end
local head, lease, locker = next_in_line()
if head then
  hand_over(head, lease, locker)
else
  redis.call('DEL', lock)
  wake_a_locker(KEYS[6], channel, '')
end
return 1
