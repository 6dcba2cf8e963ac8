-- Take a fair lock, or wait in line for it. A hand-over publishes
-- "<token> <fence> <server time in us>" on the waiter's Locker's channel.
-- KEYS: see fair_line.lua.
-- ARGV[1] the caller's token
-- ARGV[2] the caller's lease in milliseconds
-- ARGV[3] expiry of the fence counter in milliseconds (a hand-over draws a token too)
-- ARGV[4] how long the caller's place in line lasts, in milliseconds; 0: do not queue
-- ARGV[5] expiry of the line's keys and of the waiting Lockers' set in milliseconds,
--         longer than any place
-- ARGV[6] the caller's Locker: a hex id naming the channel of its hand-overs
-- Returns {1, fencing token, lease left in ms} when the caller holds the lock (taken now,
-- or handed to it earlier); {0, the holder's lease left in ms, server time in us} when it
-- waits.
local token = ARGV[1]
local owner = redis.call('GET', lock)
if owner == token then
  -- Handed over to the caller, whose message went astray; or this same attempt,
  -- retried because the connection died before its reply came.
  return {1, current_fence(counter, ARGV[3]), redis.call('PTTL', lock)}
end
-- The first in line is taken out of it to see who it is: whoever it is gets the lock.
local head, lease, locker
local function someone_ahead()
  head, lease, locker = next_in_line()
  return head ~= nil and head ~= token
end
if admits(owner, nil, someone_ahead) then
  return {1, take(token, ARGV[2], ARGV[3]), tonumber(ARGV[2])}
end
if head then
  -- Free (its holder's lease ran out, or an exclusive release freed it) with someone
  -- ahead of the caller: it is theirs.
  hand_over(head, lease, locker, ARGV[3])
end
local place = tonumber(ARGV[4])
if place > 0 then
  local entry = string.format('%d:%s:%s', now + place * 1000, ARGV[2], ARGV[6])
  if redis.call('HSET', places, token, entry) == 1 then
    redis.call('RPUSH', line, token)
  end
  redis.call('PEXPIRE', line, ARGV[5])
  redis.call('PEXPIRE', places, ARGV[5])
  register(KEYS[6], ARGV[6], ARGV[5], now)
end
return {0, redis.call('PTTL', lock), now}
