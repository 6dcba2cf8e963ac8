//! What the stores' fence counters share: a counter that is new, or that ran out, starts
//! from the wall clock in microseconds, so that a lock's tokens never go backwards while
//! the clock does not (Redis's `fence.lua` starts from the server's clock alike); and the
//! name of a database store's fence table, checked alike by each.

use std::time::{SystemTime, UNIX_EPOCH};

/// This process's wall clock, in microseconds since the Unix epoch.
pub(crate) fn wall_clock_us() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX)
}

/// Checks the fence table name of the `store` (`"postgres"`, `"mysql"`): one or two
/// parts (`qualified` names the first, such as `schema.name`) of ASCII letters, digits
/// and `_`, not starting with a digit: nothing that needs quoting.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn check_table(
    store: &str,
    table: &str,
    qualified: &str,
) -> Result<(), crate::LockError> {
    let part_ok = |part: &str| {
        part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && part.bytes().next().is_some_and(|b| !b.is_ascii_digit())
    };
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() <= 2 && parts.iter().all(|p| part_ok(p)) {
        return Ok(());
    }
    Err(crate::LockError::Config(format!(
        "{store} fence table {table:?} must be a name or {qualified} of ASCII letters, digits and '_'"
    )))
}

#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
mod tests {
    use super::*;

    #[test]
    fn fence_tables_are_plain_names() {
        for good in ["lock_fences", "app.fences", "_f1"] {
            check_table("sql", good, "schema.name").unwrap();
        }
        for bad in ["", "1f", "a.b.c", "a b", "f;drop", "\"f\"", "a."] {
            let err = check_table("sql", bad, "schema.name").unwrap_err();
            assert!(err.is_config(), "{bad:?}");
        }
    }
}
