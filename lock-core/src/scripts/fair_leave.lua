-- A fair waiter stops waiting: it leaves the line, and if the lock was handed over to it
-- meanwhile, releases it to the next in line.
-- KEYS: see fair_line.lua.
-- ARGV[1] the waiter's token
-- ARGV[2] expiry of the fence counter in milliseconds (a hand-over draws a token)
-- Returns 1 when the lock had been handed over to the waiter (now passed on), 0 otherwise.
redis.call('LREM', line, 1, ARGV[1])
redis.call('HDEL', places, ARGV[1])
return release(ARGV[1], ARGV[2])
