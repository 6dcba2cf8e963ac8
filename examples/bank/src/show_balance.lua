-- Reads an account's balance for showing it, under the read side of the account's lock,
-- and records the reader's fencing token on the account unless it has seen a newer one: from
-- then on the account refuses a read-modify-write with an older token. Never refused itself:
-- readers share the lock, each with a token of its own, so an older reader may well get here
-- after a newer one; and a read changes no balance.
-- KEYS[1]:  the hash of the account (fields `balance` and `fence`, the newest token that
--           has read or written it)
-- ARGV[1]:  the fencing token of the reader's lock on it (0 when running unlocked)
-- Returns the balance (nil for an account never written).
local last = redis.call('HGET', KEYS[1], 'fence')
if not last or older(last, ARGV[1]) then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
return redis.call('HGET', KEYS[1], 'balance') or false
