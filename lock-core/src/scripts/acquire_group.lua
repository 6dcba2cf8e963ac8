-- Take several exclusive locks, each for its own caller: the acquisitions that queued on
-- one connection while another was in flight, sent as one call. Each is independent of
-- the others, as if sent alone; none names itself.
-- KEYS    per acquisition, three: its lock key P{K}, fence counter P{K}:fence and
--         waiting Lockers P{K}:lockers
-- ARGV    per acquisition, four: its owner token, lease in milliseconds, fence counter's
--         expiry in milliseconds, and Locker to wake ('': it will not wait); then the
--         expiry of the waiting Lockers' sets in milliseconds, and the fence seed
-- Returns take_exclusive's reply for each, in order.
local replies = {}
local lockers_ms = ARGV[#ARGV - 1]
for i = 0, #KEYS / 3 - 1 do
  local k, a = i * 3, i * 4
  replies[i + 1] = take_exclusive(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], nil,
    ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], lockers_ms, nil)
end
return replies
