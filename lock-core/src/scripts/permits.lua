-- Free permits of a semaphore, now.
-- KEYS[1] lock key   P{K}
-- KEYS[2] holders    P{K}:holders
-- KEYS[3] count      P{K}:permits
-- ARGV[1] the count the caller's handle asks with, the answer for a semaphore not in use
-- Returns the count less the live holders (0 while the key is held as another kind).
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= 'semaphore' then
  return 0
end
local count = tonumber(redis.call('GET', KEYS[3])) or tonumber(ARGV[1])
local held = redis.call('ZCOUNT', KEYS[2], '(' .. clock_ms(), '+inf')
return math.max(count - held, 0)
