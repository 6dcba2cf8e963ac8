//! The balances in PostgreSQL: one row per account in the table `bank_accounts`, which
//! the bank creates on start, each access fenced as the [store docs](super) say, in SQL.
//!
//! The write is the update the README recommends, `.. SET balance = .., fence = $token
//! WHERE .. fence <= $token`, as an upsert so that an account's first write makes its
//! row; the read of a read-modify-write is fenced the same way, and both are all or none
//! in a transaction.
//!
//! Each replica opens at most [`LOCK_CONNECTIONS`] connections for its locks and
//! [`BALANCE_CONNECTIONS`] for its balances, 18 in all, so five replicas open at most 90
//! of the 97 that a server with the default `max_connections` (100, of which
//! `superuser_reserved_connections` keeps 3) lets in. The 7 left are room for an
//! operator's forced unlock (`DELETE /admin/locks/{key}`), which opens one for a moment.

use std::collections::HashMap;
use std::error::Error as _;
use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::redis::bb8::{self, ManageConnection, Pool};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, NoTls};

use super::{Read, StoreError, Totals, Write};

/// The connections a replica's locks take at most (the lock store's default).
pub(crate) const LOCK_CONNECTIONS: usize = lock_core::backend::postgres::DEFAULT_MAX_CONNECTIONS;
/// The connections a replica's balances take at most.
pub(crate) const BALANCE_CONNECTIONS: u32 = 8;

/// The accounts: `fence` is the newest fencing token that has read or written the row.
/// Created under a transaction's advisory lock, so that replicas starting at once on a
/// fresh database take turns, and the later ones find the table there (two that both
/// found it missing would both create it, and the second be refused).
pub(crate) const CREATE_TABLE: &str = "SELECT pg_advisory_xact_lock(hashtext('bank_accounts'));
CREATE TABLE IF NOT EXISTS bank_accounts (
    id text PRIMARY KEY,
    balance bigint NOT NULL,
    fence bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS bank_fenced_by (
    one_row boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    lock_store text NOT NULL
)";

/// [`Store::fenced_by`](super::Store::fenced_by): records the lock store unless one is
/// recorded, and answers the one recorded (the insert's own row is not visible to the
/// rest of its statement, hence both).
const FENCED_BY: &str = "WITH recorded AS (
        INSERT INTO bank_fenced_by (lock_store) VALUES ($1) ON CONFLICT DO NOTHING
        RETURNING lock_store
    )
    SELECT lock_store FROM recorded UNION ALL SELECT lock_store FROM bank_fenced_by";

/// [`Store::balance`](super::Store::balance): records the reader's token unless the row
/// has seen a newer one, and is never refused.
const SHOW_BALANCE: &str = "INSERT INTO bank_accounts (id, balance, fence) VALUES ($1, 0, $2)
    ON CONFLICT (id) DO UPDATE SET fence = GREATEST(bank_accounts.fence, EXCLUDED.fence)
    RETURNING balance";

/// [`Store::read`](super::Store::read): records each reader's token, on each row that has
/// seen no newer one; the rows in the order of their ids, so that two reads cannot
/// deadlock.
const READ_BALANCES: &str = "INSERT INTO bank_accounts (id, balance, fence)
    SELECT id, 0, fence FROM unnest($1::text[], $2::bigint[]) AS r(id, fence) ORDER BY id
    ON CONFLICT (id) DO UPDATE SET fence = EXCLUDED.fence
    WHERE bank_accounts.fence <= EXCLUDED.fence
    RETURNING id, balance";

/// [`Store::write`](super::Store::write): writes each balance whose row has seen no newer
/// token than the writer's.
const WRITE_BALANCES: &str = "INSERT INTO bank_accounts (id, balance, fence)
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS w(id, balance, fence)
    ORDER BY id
    ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, fence = EXCLUDED.fence
    WHERE bank_accounts.fence <= EXCLUDED.fence";

/// [`Store::totals`](super::Store::totals): one statement, so one snapshot. The sum of
/// bigints is a numeric, which is read as text.
const TOTALS: &str = "SELECT count(*) AS accounts, coalesce(sum(balance), 0)::text AS total
    FROM bank_accounts";

/// The balances in the database of a `DATABASE_URL`.
#[derive(Debug, Clone)]
pub(crate) struct Balances(Pool<Connector>);

impl Balances {
    /// At most [`BALANCE_CONNECTIONS`] connections to the database at `url`; the first is
    /// made here, to create the table if it is missing. A transaction left open for
    /// `lease` (its process paused or wedged halfway) is ended by the server, so that the
    /// rows it locked do not stay locked for longer than the lock it ran under.
    pub(crate) async fn open(url: &str, lease: Duration) -> Result<Balances, StoreError> {
        let config = Config::from_str(url)
            .map_err(|e| StoreError(format!("DATABASE_URL is not a valid postgres url: {e}")))?;
        let pool = Pool::builder()
            .max_size(BALANCE_CONNECTIONS)
            .connection_timeout(Duration::from_secs(2))
            // a connection that fails is an error at once, with its cause
            .retry_connection(false)
            .build(Connector { config, lease })
            .await
            .map_err(failed)?;
        let balances = Balances(pool);
        balances.create_table().await?;
        Ok(balances)
    }

    /// Creates the table unless it exists: one batch, so one transaction.
    async fn create_table(&self) -> Result<(), StoreError> {
        let conn = self.0.get().await.map_err(pool_failed)?;
        conn.batch_execute(CREATE_TABLE).await.map_err(failed)
    }

    /// A replica that records its store at the same moment may commit after this
    /// statement's snapshot was taken: its insert makes this one's do nothing, yet its row
    /// is not in this one's snapshot. The next statement's snapshot has it.
    pub(crate) async fn fenced_by(&self, locks: &str) -> Result<String, StoreError> {
        let conn = self.0.get().await.map_err(pool_failed)?;
        for _ in 0..2 {
            let rows = conn
                .query_typed(FENCED_BY, &[(&locks, Type::TEXT)])
                .await
                .map_err(failed)?;
            if let Some(row) = rows.first() {
                return Ok(row.get("lock_store"));
            }
        }
        Err(StoreError("postgres: no lock store recorded".into()))
    }

    /// Whether the database answers.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        let conn = self.0.get().await.map_err(pool_failed)?;
        conn.simple_query("").await.map(drop).map_err(failed)
    }

    pub(crate) async fn totals(&self) -> Result<Totals, StoreError> {
        let conn = self.0.get().await.map_err(pool_failed)?;
        let row = conn.query_typed_one(TOTALS, &[]).await.map_err(failed)?;
        let accounts: i64 = row.get("accounts");
        let total: String = row.get("total");
        Ok(Totals {
            accounts: u64::try_from(accounts).unwrap_or_default(),
            total: total
                .parse()
                .map_err(|_| StoreError(format!("postgres: a total of {total:?}")))?,
        })
    }

    pub(crate) async fn balance(&self, id: &str, fence: u64) -> Result<i64, StoreError> {
        let conn = self.0.get().await.map_err(pool_failed)?;
        let params = [(&id as _, Type::TEXT), (&token(fence)? as _, Type::INT8)];
        let row = conn
            .query_typed_one(SHOW_BALANCE, &params)
            .await
            .map_err(failed)?;
        Ok(row.get("balance"))
    }

    pub(crate) async fn read<const N: usize>(
        &self,
        reads: &[Read<'_>; N],
    ) -> Result<Option<[i64; N]>, StoreError> {
        let ids: Vec<&str> = reads.iter().map(|r| r.id).collect();
        let fences = reads
            .iter()
            .map(|r| token(r.fence))
            .collect::<Result<Vec<_>, _>>()?;
        let mut conn = self.0.get().await.map_err(pool_failed)?;
        let transaction = conn.transaction().await.map_err(failed)?;
        let params = [
            (&ids as _, Type::TEXT_ARRAY),
            (&fences as _, Type::INT8_ARRAY),
        ];
        let rows = transaction
            .query_typed(READ_BALANCES, &params)
            .await
            .map_err(failed)?;
        if rows.len() < N {
            transaction.rollback().await.map_err(failed)?;
            return Ok(None);
        }
        transaction.commit().await.map_err(failed)?;
        let by_id: HashMap<&str, i64> = rows
            .iter()
            .map(|row| (row.get("id"), row.get("balance")))
            .collect();
        // one row for each id, as there are N rows of N ids
        Ok(Some(reads.map(|r| by_id[r.id])))
    }

    pub(crate) async fn write(&self, writes: &[Write<'_>]) -> Result<bool, StoreError> {
        let ids: Vec<&str> = writes.iter().map(|w| w.id).collect();
        let balances: Vec<i64> = writes.iter().map(|w| w.balance).collect();
        let fences = writes
            .iter()
            .map(|w| token(w.fence))
            .collect::<Result<Vec<_>, _>>()?;
        let mut conn = self.0.get().await.map_err(pool_failed)?;
        let transaction = conn.transaction().await.map_err(failed)?;
        let params = [
            (&ids as _, Type::TEXT_ARRAY),
            (&balances as _, Type::INT8_ARRAY),
            (&fences as _, Type::INT8_ARRAY),
        ];
        let written = transaction
            .execute_typed(WRITE_BALANCES, &params)
            .await
            .map_err(failed)?;
        if written < writes.len() as u64 {
            transaction.rollback().await.map_err(failed)?;
            return Ok(false);
        }
        transaction.commit().await.map_err(failed)?;
        Ok(true)
    }
}

/// A fencing token as the `bigint` column keeps it. The lock store's tokens are bigints
/// themselves, so a larger one comes only from another store.
fn token(fence: u64) -> Result<i64, StoreError> {
    i64::try_from(fence)
        .map_err(|_| StoreError(format!("fencing token {fence} is beyond a postgres bigint")))
}

/// The error with its cause (the server's message, for an error of the server's).
fn failed(e: tokio_postgres::Error) -> StoreError {
    match e.source() {
        Some(cause) => StoreError(format!("postgres: {e}: {cause}")),
        None => StoreError(format!("postgres: {e}")),
    }
}

fn pool_failed(e: bb8::RunError<tokio_postgres::Error>) -> StoreError {
    match e {
        bb8::RunError::User(e) => failed(e),
        bb8::RunError::TimedOut => StoreError("postgres: no connection within 2 s".into()),
    }
}

/// Opens the pool's connections, each driven by a task of its own.
#[derive(Debug)]
pub(crate) struct Connector {
    config: Config,
    /// How long the server lets a transaction sit idle.
    lease: Duration,
}

impl ManageConnection for Connector {
    type Connection = Client;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("postgres connection of the balances: {e}");
            }
        });
        let lease = self.lease.as_millis();
        client
            .batch_execute(&format!(
                "SET idle_in_transaction_session_timeout = {lease}"
            ))
            .await?;
        Ok(client)
    }

    async fn is_valid(&self, client: &mut Client) -> Result<(), tokio_postgres::Error> {
        client.simple_query("").await.map(drop)
    }

    fn has_broken(&self, client: &mut Client) -> bool {
        client.is_closed()
    }
}
