-- Who holds a lock, and how many Lockers wait for it, as an operator asked. Read-only.
-- KEYS[1] lock key         P{K}: an owner's token, or 'read' / 'semaphore' while shared
-- KEYS[2] fence counter    P{K}:fence
-- KEYS[3] readers          P{K}:readers   sorted set: token -> lease end (server ms)
-- KEYS[4] permit holders   P{K}:holders   sorted set: token -> lease end (server ms)
-- KEYS[5] count            P{K}:permits
-- KEYS[6] waiting Lockers  P{K}:lockers
-- KEYS[7] holder id        P{K}:holder_id
-- Returns nil when nobody holds the lock; else {mark, count, lockers, fence, holders, id}:
-- - mark: '' for an owner (exclusive, fair or write, as its token's last letter says),
--   else 'read' or 'semaphore';
-- - count: a semaphore's stored count, nil for the others or if it ran out;
-- - lockers: how many Lockers are registered to be woken when the lock is freed;
-- - fence: an owner's fencing token, nil for shared holds (the counter's value is the last
--   holder's token, not each one's). Every script that draws a token draws it as it makes
--   its caller a holder, which none does while an owner holds the lock: the counter's
--   value is the owner's token (nil if the counter ran out);
-- - holders: {token, lease left in ms (-1: no expiry)} for each holder;
-- - id: an owner's holder id, left out (nil) for one that named itself nothing and for
--   shared holds.
local lock = KEYS[1]
local owner = redis.call('GET', lock)
if not owner then
  return nil
end
local lockers = redis.call('ZCARD', KEYS[6])
if owner ~= 'read' and owner ~= 'semaphore' then
  local fence = redis.call('GET', KEYS[2])
  local holder = {{owner, redis.call('PTTL', lock)}}
  return {'', false, lockers, fence, holder, holder_id_of(KEYS[7], owner)}
end
local holders, count = KEYS[3], false
if owner == 'semaphore' then
  holders, count = KEYS[4], redis.call('GET', KEYS[5])
end
local now_ms = clock_ms()
local live = redis.call('ZRANGEBYSCORE', holders, '(' .. now_ms, '+inf', 'WITHSCORES')
if #live == 0 then
  return nil
end
local seen = {}
for i = 1, #live, 2 do
  seen[#seen + 1] = {live[i], tonumber(live[i + 1]) - now_ms}
end
return {owner, count, lockers, false, seen}
