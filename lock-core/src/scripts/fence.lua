-- Prepended to the scripts that take a lock: draws its next fencing token.
-- counter  P{N}:fence  integer, strictly increasing per lock
-- ttl_ms   expiry of the counter in milliseconds (refreshed on every acquisition)
local function draw_fence(counter, ttl_ms)
  local fence = redis.call('INCR', counter)
  if fence == 1 then
    -- A new counter (first use, expired while idle, or lost with a restarted server)
    -- starts from the server clock in microseconds, so tokens never go backwards.
    local now = redis.call('TIME')
    local seed = now[1] .. string.format('%06d', tonumber(now[2]))
    redis.call('SET', counter, seed, 'PX', ttl_ms)
    return tonumber(seed)
  end
  redis.call('PEXPIRE', counter, ttl_ms)
  return fence
end

