-- Prepended to the account scripts: fencing tokens compared exactly.

-- Whether token `a` is older than token `b`. Tokens are u64s in decimal without leading
-- zeros, so comparing lengths, then strings, is exact (Lua numbers are doubles).
local function older(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

