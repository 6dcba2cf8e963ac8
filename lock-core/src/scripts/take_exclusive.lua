-- Prepended to the scripts that take an exclusive lock, one call or a group of them.
-- lock      P{K}
-- counter   P{K}:fence
-- lockers   P{K}:lockers, the Lockers a release wakes
-- holder    P{K}:holder_id, only for a caller that names itself (nil otherwise)
-- token     owner token (uuid v4, one per acquisition)
-- lease_ms  lease in milliseconds
-- fence_ms  expiry of the fence counter in milliseconds (renewed every 64 tokens)
-- waiting   the caller's Locker, to wake when the lock is freed ('': the caller will not wait)
-- lockers_ms  expiry of the waiting Lockers' set in milliseconds
-- id        the caller's holder id, only with `holder`
-- Returns {1, fencing token} when the caller holds the lock; {0, the holder's lease left in
-- ms} when someone else does (-1: a holder with no lease).
local function take_exclusive(lock, counter, lockers, holder, token, lease_ms, fence_ms,
                              waiting, lockers_ms, id)
  -- Set only if nobody holds it, answering who did: admits' whole rule for this kind.
  local owner = redis.call('SET', lock, token, 'NX', 'PX', lease_ms, 'GET')
  if admits(owner) then
    if holder then
      keep_holder_id(holder, token, id, lease_ms)
    end
    return {1, draw_fence(counter, fence_ms)}
  end
  if owner == token then
    -- This same acquisition, retried because the connection died before its reply came:
    -- the first attempt went through, and its token is the counter's current value.
    redis.call('PEXPIRE', lock, lease_ms)
    if holder then
      keep_holder_id(holder, token, id, lease_ms)
    end
    return {1, current_fence(counter, fence_ms)}
  end
  if waiting ~= '' then
    register(lockers, waiting, lockers_ms)
  end
  return {0, redis.call('PTTL', lock)}
end
