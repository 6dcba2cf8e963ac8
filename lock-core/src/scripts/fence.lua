-- Prepended to the scripts that take a lock: draws its next fencing token.
-- counter  P{K}:fence  integer, strictly increasing per lock
-- ttl_ms   expiry of the counter in milliseconds, renewed every 64 tokens
local function draw_fence(counter, ttl_ms)
  local fence = redis.call('INCR', counter)
  if fence == 1 then
    -- A new counter (first use, expired, or lost with a restarted server) starts from
    -- the server clock in microseconds, so tokens never go backwards.
    local now = redis.call('TIME')
    local seed = now[1] .. string.format('%06d', tonumber(now[2]))
    redis.call('SET', counter, seed, 'PX', ttl_ms)
    return tonumber(seed)
  end
  -- Renewing the expiry costs about as much Redis time as the INCR and the SET together,
  -- so a busy counter renews it now and then, not each time. One that expires anyway is
  -- started again from the clock, as above: the expiry only keeps idle locks from
  -- leaving counters behind forever.
  if fence % 64 == 0 then
    redis.call('PEXPIRE', counter, ttl_ms)
  end
  return fence
end

-- The token of the lock the caller already holds (an acquisition retried, or a fair lock
-- handed over): the counter's value, or a new token should the counter have expired.
local function current_fence(counter, ttl_ms)
  return tonumber(redis.call('GET', counter)) or draw_fence(counter, ttl_ms)
end

