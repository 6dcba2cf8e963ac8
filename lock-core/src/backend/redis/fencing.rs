//! Fencing tokens on Redis: where a new fence counter starts ([`FenceSeed`]), and how a
//! token drawn on a master carries Sentinel's failover epoch above the master's counter
//! ([`in_epoch`]), so that a token drawn after a failover outranks every one drawn before.

use redis::ToRedisArgs;

/// The bits of a fencing token below the failover epoch: a counter seeded from the
/// server clock in microseconds stays below 2^52 until the year 2112.
const EPOCH_SHIFT: u32 = 52;
/// The largest epoch that fits above them.
const MAX_EPOCH: u64 = (1 << (64 - EPOCH_SHIFT)) - 1;

/// The fencing token drawn as `raw` on a master of failover epoch `epoch`: every token of
/// a later epoch is larger, even when the new master's counter lost the last draws of the
/// old one. Epochs past 4,095 count as 4,095. Epoch 0 (no failover, or no Sentinel)
/// leaves the token as drawn.
pub(super) fn in_epoch(epoch: u64, raw: u64) -> u64 {
    if epoch == 0 {
        return raw;
    }
    (epoch.min(MAX_EPOCH) << EPOCH_SHIFT).saturating_add(raw)
}

/// Where a new fence counter starts, the last argument of every script that draws tokens
/// (`fence.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FenceSeed {
    /// At the server's clock, in microseconds.
    ServerClock,
    /// At this value, a clock in microseconds too: RedLock gives all its masters the same
    /// one, so that their new counters agree.
    Given(u64),
}

impl ToRedisArgs for FenceSeed {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let seed = match self {
            Self::ServerClock => 0,
            Self::Given(seed) => *seed,
        };
        seed.write_redis_args(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_epoch_outranks_every_token_of_an_earlier_one() {
        let now_us = 1_795_563_254_076_183;
        assert_eq!(
            in_epoch(0, now_us),
            now_us,
            "no failover: the token as drawn"
        );
        let newest_of_epoch_1 = in_epoch(1, (1 << EPOCH_SHIFT) - 1);
        assert!(in_epoch(1, 1) > in_epoch(0, now_us * 2));
        assert!(in_epoch(2, 1) > newest_of_epoch_1);
        assert!(in_epoch(1, now_us) < in_epoch(1, now_us + 1));
        assert_eq!(
            in_epoch(MAX_EPOCH + 7, 5),
            in_epoch(MAX_EPOCH, 5),
            "no overflow"
        );
    }
}
