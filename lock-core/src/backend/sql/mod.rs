//! What the SQL stores (PostgreSQL, MySQL) share: sessions on their own connections,
//! confirmed alive by the server's answers ([`sessions`]); locking on those sessions,
//! shared or lent to a wait inside the server ([`session_locks`]); the holds taken on
//! them ([`holds`]) and the gates that queue a store's retries ([`gates`]); and the
//! check of a fence table's name ([`check_table`]).

pub(crate) mod gates;
pub(crate) mod holds;
pub(crate) mod session_locks;
pub(crate) mod sessions;

/// Checks the fence table name of the `store` (`"postgres"`, `"mysql"`): one or two
/// parts (`qualified` names the first, such as `schema.name`) of ASCII letters, digits
/// and `_`, not starting with a digit: nothing that needs quoting.
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

#[cfg(test)]
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
