//! The MySQL floor: the store's own take, waiting inside the server, and
//! `RELEASE_LOCK`, on one mysql_async connection.

use std::sync::Arc;

use mysql_async::prelude::Queryable;

/// The MySQL floor waiting inside the server: one mysql_async connection.
#[derive(Debug, Clone)]
pub(crate) struct MySqlFloor {
    conn: Arc<tokio::sync::Mutex<mysql_async::Conn>>,
}

impl MySqlFloor {
    /// The floor's fence table, apart from the store's.
    pub(crate) const TABLE: &str = "floor_fences";

    pub(crate) async fn connect(url: &str) -> Self {
        let conn = mysql_async::Conn::from_url(url)
            .await
            .expect("connect the mysql floor");
        Self {
            conn: Arc::new(tokio::sync::Mutex::new(conn)),
        }
    }

    /// Waits inside the server for the lock `name` and draws its fencing token, in one
    /// statement.
    pub(crate) async fn acquire_waiting(&self, name: &str) {
        let table = Self::TABLE;
        let sql = format!(
            "INSERT INTO {table} (name, token) SELECT ?, LAST_INSERT_ID(1) FROM DUAL \
             WHERE GET_LOCK(?, 300) = 1 \
             ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID({table}.token + 1)"
        );
        let mut conn = self.conn.lock().await;
        conn.exec_drop(sql, (name, name))
            .await
            .expect("the floor's wait");
        let fence = conn.last_insert_id();
        assert!(
            std::hint::black_box(fence).is_some_and(|f| f > 0),
            "no fence"
        );
    }

    pub(crate) async fn release(&self, name: &str) {
        let released: Option<i64> = self
            .conn
            .lock()
            .await
            .exec_first("SELECT RELEASE_LOCK(?)", (name,))
            .await
            .expect("the floor's RELEASE_LOCK");
        assert_eq!(
            released,
            Some(1),
            "the floor released a lock it did not hold"
        );
    }
}
