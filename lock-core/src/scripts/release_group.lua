-- Release several exclusive locks, each for its own owner: the releases that queued on one
-- connection while another was in flight, sent as one call. Each is independent of the
-- others, as if sent alone; none of the owners named itself.
-- KEYS    per release, three: its lock key P{K}, waiting Lockers P{K}:lockers and
--         release channel P{K}:released
-- ARGV    per release, two: its owner token, and '1' when tasks of the caller's Locker
--         wait for the lock too; then the caller's Locker ('' for none), and the expiry of
--         the waiting Lockers' sets in milliseconds
-- Returns free_exclusive's reply for each, in order.
local replies = {}
local own, lockers_ms = ARGV[#ARGV - 1], ARGV[#ARGV]
for i = 0, #KEYS / 3 - 1 do
  local k, a = i * 3, i * 2
  replies[i + 1] = free_exclusive(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], nil,
    ARGV[a + 1], own, ARGV[a + 2], lockers_ms)
end
return replies
