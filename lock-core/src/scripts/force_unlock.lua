-- Free a lock whoever holds it, as an operator asked: its owner's key and holder id, its
-- readers and its permit holders go, and every waiting Locker is woken. The holders learn
-- of it when their next renewal finds their hold gone.
-- KEYS[1] lock key          P{K}
-- KEYS[2] readers           P{K}:readers
-- KEYS[3] permit holders    P{K}:holders
-- KEYS[4] holder id         P{K}:holder_id, and the channel that announces its going
-- KEYS[5] waiting Lockers   P{K}:lockers
-- KEYS[6] release channel   P{K}:released (a Locker's own: this, ':', its id)
-- Returns 1 when the lock was held, 0 when it was free.
local held = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call('PUBLISH', KEYS[4], '')
wake_every_locker(KEYS[5], KEYS[6])
return held
