-- Release the write side of a read-write lock if the caller holds it, or take a writer
-- that gives up out of those waiting; either wakes every waiting reader, which may all go
-- in, and the writer that has waited longest.
-- KEYS[1] lock key          P{K}
-- KEYS[2] waiting writers   P{K}:writers
-- KEYS[3] waiting Lockers   P{K}:lockers
-- KEYS[4] release channel   P{K}:released (a Locker's own: this, ':', its id)
-- ARGV[1] the writer's token
-- Returns 1 when the caller held the lock (now free), 0 otherwise.
local stopped_waiting = redis.call('HDEL', KEYS[2], ARGV[1]) == 1
local held = redis.call('GET', KEYS[1]) == ARGV[1]
if held then
  redis.call('DEL', KEYS[1])
end
if held or stopped_waiting then
  wake_after_write(KEYS[3], KEYS[4], KEYS[2])
end
if held then
  return 1
end
return 0
