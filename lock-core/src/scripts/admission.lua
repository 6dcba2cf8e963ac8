-- Prepended to the scripts that take a lock: who goes in, one rule for every kind of lock,
-- the twin of the memory store's `admission.rs`. Each hold takes some of a lock: an
-- exclusive, fair or write hold all of it; a read one share, beside as many reads as come;
-- a permit one of the semaphore's count, beside other permits. The lock key P{K} holds
-- the holder's token, or, while shares hold it, their sharing's mark ('read' or
-- 'semaphore'), with the share holders in a sorted set (shared.lua). A caller goes in when
-- what it takes is free and nobody waits ahead of it. For a hold that takes all and keeps
-- no order (exclusive, write) that is "nobody holds it", which `SET .. NX GET` checks and
-- acts on in one command: those scripts pass admits what it answered.

-- Whether a caller goes in now to the lock whose key holds `owner` (nil: nobody holds it).
-- share: nil for a hold that takes all of the lock; else {mark = the sharing's mark,
--        holders = its holders' set, count = how many may share (nil: as many as come)},
--        with the holders whose lease ran out pruned already
-- ahead: nil for a kind that keeps no order (whoever asks first once there is room goes
--        in); else a function that says whether someone waits ahead of the caller, asked
--        only when there is room
local function admits(owner, share, ahead)
  local free
  if not owner then
    free = true
  elseif not share or owner ~= share.mark then
    free = false
  else
    free = not share.count or redis.call('ZCARD', share.holders) < share.count
  end
  return free and not (ahead and ahead())
end
