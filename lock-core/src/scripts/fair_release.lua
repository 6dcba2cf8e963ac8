-- Release a fair lock: to the first in line, or free.
-- KEYS: see fair_line.lua.
-- ARGV[1] the holder's token
-- ARGV[2] expiry of the fence counter in milliseconds (a hand-over draws a token)
-- Returns 1 when the caller held the lock (now handed over or free), 0 otherwise.
return release(ARGV[1], ARGV[2])
