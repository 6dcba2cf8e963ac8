-- Raises a lock's fence counter to at least a token drawn elsewhere (RedLock: the largest
-- of the granting masters' tokens), so that every later token of this master exceeds it.
-- KEYS[1]  P{K}:fence  the counter
-- ARGV[1]  the token
-- ARGV[2]  expiry of a new counter, in milliseconds
local counter = tonumber(redis.call('GET', KEYS[1]))
if counter == nil then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif counter < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
return 1
