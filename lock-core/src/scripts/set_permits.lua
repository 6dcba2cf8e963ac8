-- Store a semaphore's count, and wake every waiting Locker: a raised count may admit
-- several.
-- KEYS[1] count             P{K}:permits
-- KEYS[2] waiting Lockers   P{K}:lockers
-- KEYS[3] release channel   P{K}:released (a Locker's own: this, ':', its id)
-- ARGV[1] the count
-- ARGV[2] how long it is kept, in milliseconds (the fence counter's expiry)
-- Returns 1.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
wake_every_locker(KEYS[2], KEYS[3])
return 1
