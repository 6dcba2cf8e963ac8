-- Relay a wake-up that reached a Locker with no task left waiting for the lock (its
-- waiters got the lock otherwise, or gave up, while it was still listening): wake the
-- next waiting Locker instead, so that the release is not lost on it.
-- KEYS[1] waiting Lockers   P{K}:lockers
-- KEYS[2] release channel   P{K}:released (a Locker's own: this, ':', its id)
-- ARGV[1] the relaying Locker
-- Returns 1 when a Locker was woken, 0 when none waits.
if wake_a_locker(KEYS[1], KEYS[2], ARGV[1]) then
  return 1
end
return 0
