-- Take the read side of a read-write lock, or find it held. Writer-preferring: a reader
-- that began to ask after a waiting writer did waits for it.
-- KEYS[1] lock key        P{K}: 'read' while readers hold it, else a writer's token
-- KEYS[2] fence counter   P{K}:fence
-- KEYS[3] readers         P{K}:readers   sorted set: token -> lease end (server ms)
-- KEYS[4] waiting writers P{K}:writers   hash: token -> "<began to ask>:<place runs out>:
--                                        <its Locker>" (server ms)
-- KEYS[5] waiting Lockers P{K}:lockers
-- ARGV[1] owner token (one per acquisition)
-- ARGV[2] lease in milliseconds
-- ARGV[3] expiry of the fence counter in milliseconds
-- ARGV[4] how long ago the caller began to ask, in milliseconds
-- ARGV[5] the caller's Locker, to wake when the lock may be free ('': it will not wait)
-- ARGV[6] expiry of the waiting Lockers' set in milliseconds
-- Returns {1, fencing token} when the caller reads; {0, the lock key's lease left in ms}
-- (-2: none, a writer waits ahead) when it must wait.
local lock, readers, writers = KEYS[1], KEYS[3], KEYS[4]
local now_ms = clock_ms()
local asked_at = now_ms - tonumber(ARGV[4])

-- Whether a writer that began to ask no later than the caller waits; the writers whose
-- place ran out are dropped.
local function writer_ahead()
  local ahead = false
  local waiting = redis.call('HGETALL', writers)
  for i = 1, #waiting, 2 do
    local since, place = string.match(waiting[i + 1], '^(%d+):(%d+):%x*$')
    if not place or tonumber(place) <= now_ms then
      redis.call('HDEL', writers, waiting[i])
    elseif tonumber(since) <= asked_at then
      ahead = true
    end
  end
  return ahead
end

if not admits(redis.call('GET', lock), {mark = 'read'}, writer_ahead) then
  if ARGV[5] ~= '' then
    register(KEYS[5], ARGV[5], ARGV[6])
  end
  return {0, redis.call('PTTL', lock)}
end
prune(readers, now_ms)
-- A retried attempt finds its token there already, and draws a new fencing token all
-- the same: other readers may have drawn since.
redis.call('ZADD', readers, now_ms + tonumber(ARGV[2]), ARGV[1])
stretch(lock, readers, 'read', now_ms)
return {1, draw_fence(KEYS[2], ARGV[3])}
