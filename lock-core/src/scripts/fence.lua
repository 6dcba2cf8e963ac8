-- Prepended to the scripts that take a lock: draws its next fencing token.
-- counter  P{K}:fence  integer, strictly increasing per lock
-- ttl_ms   expiry of the counter in milliseconds, renewed every 64 tokens

-- A new counter's first token, the last argument of every script that draws tokens: '0'
-- for the server clock in microseconds; else this value (a clock too), which RedLock
-- gives all its masters alike so that their new counters agree.
local NEW_COUNTER_SEED = ARGV[#ARGV]

local function draw_fence(counter, ttl_ms)
  local fence = redis.call('INCR', counter)
  if fence == 1 then
    -- A new counter (first use, expired, or lost with a restarted server) starts from
    -- the clock in microseconds, so tokens never go backwards.
    local seed = NEW_COUNTER_SEED
    if seed == '0' then
      local now = redis.call('TIME')
      seed = now[1] .. string.format('%06d', tonumber(now[2]))
    end
    redis.call('SET', counter, seed, 'PX', ttl_ms)
    return tonumber(seed)
  end
  -- A busy counter's expiry is renewed every 64 tokens, not on each draw (BENCHMARKS.md).
  -- One that expires anyway is started again from the clock, as above: the expiry only
  -- keeps idle locks from leaving counters behind forever.
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

