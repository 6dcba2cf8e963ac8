-- Take the write side of a read-write lock, or wait among its writers. The lock key holds
-- the writer's token, as an exclusive lock's does, and is set only while no reader holds
-- it (then it holds 'read').
-- KEYS[1] lock key        P{K}
-- KEYS[2] fence counter   P{K}:fence
-- KEYS[3] waiting writers P{K}:writers   hash: token -> "<began to ask>:<place runs out>:
--                                        <its Locker>" (server ms)
-- KEYS[4] waiting Lockers P{K}:lockers
-- ARGV[1] owner token (one per acquisition)
-- ARGV[2] lease in milliseconds
-- ARGV[3] expiry of the fence counter in milliseconds
-- ARGV[4] how long ago the caller began to ask, in milliseconds
-- ARGV[5] how long the caller's place among the waiting writers lasts, in milliseconds;
--         0: it will not wait
-- ARGV[6] the caller's Locker, to wake when the lock may be free ('': it has no wake-ups)
-- ARGV[7] expiry of the waiting writers and of the waiting Lockers' set in milliseconds,
--         longer than any place
-- Returns {1, fencing token} when the caller holds the lock; {0, the holder's lease left
-- in ms} when it waits.
local lock, writers, token = KEYS[1], KEYS[3], ARGV[1]
-- Set only if nobody holds it, answering who did: admits' whole rule for this kind.
local owner = redis.call('SET', lock, token, 'NX', 'PX', ARGV[2], 'GET')
if admits(owner) then
  redis.call('HDEL', writers, token)
  return {1, draw_fence(KEYS[2], ARGV[3])}
end
if owner == token then
  -- This same attempt, retried because the connection died before its reply came.
  redis.call('PEXPIRE', lock, ARGV[2])
  return {1, current_fence(KEYS[2], ARGV[3])}
end
local place = tonumber(ARGV[5])
if place > 0 then
  local now_ms = clock_ms()
  local since = string.match(redis.call('HGET', writers, token) or '', '^(%d+):')
  since = since or (now_ms - tonumber(ARGV[4]))
  redis.call('HSET', writers, token, since .. ':' .. (now_ms + place) .. ':' .. ARGV[6])
  redis.call('PEXPIRE', writers, ARGV[7])
  if ARGV[6] ~= '' then
    register(KEYS[4], ARGV[6], ARGV[7])
  end
end
return {0, redis.call('PTTL', lock)}
