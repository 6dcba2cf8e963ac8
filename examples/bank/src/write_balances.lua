-- Writes account balances, all or none, unless a newer lock holder has read or written
-- one of them.
-- KEYS[i]:     the hash of account i (fields `balance` and `fence`, the newest token that
--              has read or written it)
-- ARGV[2i-1]:  its new balance
-- ARGV[2i]:    the fencing token of the writer's lock on it (0 when running unlocked)
-- Returns 1 when every balance was written; 0, writing nothing, when an account has already
-- seen a newer token: the writer's lease ran out and someone else holds the lock now.
for i, key in ipairs(KEYS) do
  local last = redis.call('HGET', key, 'fence')
  if last and older(ARGV[2 * i], last) then
    return 0
  end
end
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, 'balance', ARGV[2 * i - 1], 'fence', ARGV[2 * i])
end
return 1
