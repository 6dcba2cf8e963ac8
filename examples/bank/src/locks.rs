//! Where the locks live: the store that the lock url's scheme names (`LOCK_URL`, else the
//! url of the balances' store), as `Locker::connect` picks it.

use std::sync::Arc;

use lock_core::Locker;
use lock_core::backend::PostgresStore;

use crate::store::postgres::LOCK_CONNECTIONS;
use crate::{Backend, Config};

/// The locker of `config.lock_url()`, with the bank's lease and wait. On PostgreSQL, the
/// sessions that hold the locks get the lease too, and the connections are bounded so
/// that the balances' pool fits beside them (see [`crate::store::postgres`]).
pub(crate) async fn open(config: &Config) -> Result<Locker, String> {
    let url = config.lock_url();
    // DATABASE_URL alone may be in PostgreSQL's `key=value` form, which has no scheme
    let postgres = is_postgres(url)
        || (config.lock_url.is_none() && matches!(config.backend, Backend::Postgres(_)));
    let builder = if postgres {
        let store = PostgresStore::builder(url)
            .session_lease(config.lease)
            .max_connections(LOCK_CONNECTIONS)
            .build()
            .await
            .map_err(|e| with_causes(&e))?;
        Locker::builder().store(Arc::new(store))
    } else {
        Locker::builder().url(url)
    };
    builder
        .default_lease(config.lease)
        .default_wait(config.wait)
        .build()
        .await
        .map_err(|e| format!("the lock store: {}", with_causes(&e)))
}

/// Whether `url` names a PostgreSQL database.
pub(crate) fn is_postgres(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
    })
}

/// The error and each of its causes, such as the server's reason for refusing a
/// connection.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(e) = cause {
        text = format!("{text}: {e}");
        cause = e.source();
    }
    text
}
