//! The PostgreSQL floor: the store's own take and `pg_advisory_unlock`, on one
//! tokio-postgres connection.

use std::sync::Arc;

use lock_core::backend::postgres::{AdvisoryKey, KeyMapping};

/// The `tokio-postgres` floor: one connection, its statements prepared on it once.
#[derive(Debug, Clone)]
pub(crate) struct PostgresFloor {
    client: Arc<tokio_postgres::Client>,
    take: tokio_postgres::Statement,
    wait: tokio_postgres::Statement,
    unlock: tokio_postgres::Statement,
}

impl PostgresFloor {
    /// The floor's fence table, apart from the store's.
    const TABLE: &str = "floor_fences";

    pub(crate) async fn connect(url: &str) -> Self {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect tokio-postgres");
        tokio::spawn(connection);
        let table = Self::TABLE;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (name text PRIMARY KEY, fence bigint NOT NULL)"
            ))
            .await
            .expect("create the floor's fence table");
        let take_sql = |taken: &str| {
            format!(
                "INSERT INTO {table} (name, fence) SELECT $1, 1 WHERE {taken} \
                 ON CONFLICT (name) DO UPDATE SET fence = {table}.fence + 1 RETURNING fence"
            )
        };
        let take = client
            .prepare(&take_sql("pg_try_advisory_lock($2)"))
            .await
            .expect("prepare the floor's take");
        let wait = client
            .prepare(&take_sql("pg_advisory_lock($2) IS NOT NULL"))
            .await
            .expect("prepare the floor's wait");
        let unlock = client
            .prepare("SELECT pg_advisory_unlock($1)")
            .await
            .expect("prepare the floor's unlock");
        Self {
            client: Arc::new(client),
            take,
            wait,
            unlock,
        }
    }

    /// The lock `name`'s advisory key, as the store maps a long name: one bigint.
    pub(crate) fn key(name: &str) -> i64 {
        match KeyMapping::DistributedLock.key(name) {
            AdvisoryKey::Bigint(key) => key,
            other => panic!("the floor locks names of 10 characters or more, not {other:?}"),
        }
    }

    /// Takes the lock and draws its fencing token in one statement: whether it took it.
    pub(crate) async fn try_acquire(&self, name: &str, key: i64) -> bool {
        let rows = self
            .client
            .query(&self.take, &[&name, &key])
            .await
            .expect("the floor's take");
        let fence: Option<i64> = rows.first().map(|row| row.get(0));
        std::hint::black_box(fence).is_some()
    }

    /// Waits inside the server for the lock and draws its fencing token, in one statement.
    pub(crate) async fn acquire_waiting(&self, name: &str, key: i64) {
        let row = self
            .client
            .query_one(&self.wait, &[&name, &key])
            .await
            .expect("the floor's wait");
        std::hint::black_box(row.get::<_, i64>(0));
    }

    pub(crate) async fn release(&self, key: i64) {
        let row = self
            .client
            .query_one(&self.unlock, &[&key])
            .await
            .expect("the floor's unlock");
        assert!(
            row.get::<_, bool>(0),
            "the floor released a lock it did not hold"
        );
    }
}
