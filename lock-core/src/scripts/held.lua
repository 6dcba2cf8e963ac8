-- Whether the caller holds a lock.
-- KEYS[1] lock key   P{K}
-- KEYS[2] holders    P{K}:readers or P{K}:holders for a shared hold; the lock key again
--                    (unused) for the others
-- ARGV[1] owner token
-- ARGV[2] '' for an exclusive, fair or write hold; else the sharing's mark ('read' or
--         'semaphore') of a shared one
-- Returns 1 when it does, 0 otherwise.
local owner = redis.call('GET', KEYS[1])
if ARGV[2] == '' then
  return owner == ARGV[1] and 1 or 0
end
if owner ~= ARGV[2] then
  return 0
end
local ends = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
return (ends and ends > clock_ms()) and 1 or 0
