-- Reads account balances for a read-modify-write, all or none, and records on each
-- account the reader's fencing token, so that from then on the account refuses a write
-- with an older one: a holder whose lease ran out after it read cannot write back what it
-- computed, once a newer holder has read the account.
-- KEYS[i]:  the hash of account i (fields `balance` and `fence`, the newest token that
--           has read or written it)
-- ARGV[i]:  the fencing token of the reader's lock on it (0 when running unlocked)
-- Returns the balances (nil for an account never written); or nil, recording nothing,
-- when an account has already seen a newer token: the reader's lease ran out and someone
-- else holds the lock now.
for i, key in ipairs(KEYS) do
  local last = redis.call('HGET', key, 'fence')
  if last and older(ARGV[i], last) then
    return false
  end
end
local balances = {}
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, 'fence', ARGV[i])
  balances[i] = redis.call('HGET', key, 'balance') or false
end
return balances
