//! Methods with every receiver, in an inherent impl and a trait impl, `pub(crate)`.

use lock_core::{LockError, Locker, distributed_lock};

struct Account {
    locker: Locker,
    account_id: u64,
    notes: Vec<String>,
}

impl Account {
    #[distributed_lock(key = "balance:{self.account_id}", locker = self.locker, wait = "2s", lease = "10s")]
    pub(crate) async fn settle(&self, note: &str) -> Result<usize, LockError> {
        Ok(self.notes.len() + note.len())
    }

    #[distributed_lock(key = "balance:{self.account_id}", locker = self.locker)]
    async fn note(&mut self, note: &str) -> Result<(), LockError> {
        self.notes.push(note.to_owned());
        Ok(())
    }

    #[distributed_lock(key = "balance:{self.account_id}", locker = self.locker.clone())]
    async fn close(self) -> Result<Vec<String>, LockError> {
        Ok(self.notes)
    }
}

trait Settle {
    async fn settle_all(&self, ids: &[u64]) -> Result<usize, LockError>;
}

impl Settle for Account {
    #[distributed_lock(key = "batch:{self.account_id}", locker = &self.locker)]
    async fn settle_all(&self, ids: &[u64]) -> Result<usize, LockError> {
        Ok(ids.len())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut account = Account {
        locker: Locker::in_memory(),
        account_id: 1,
        notes: Vec::new(),
    };
    account.note("a").await.unwrap();
    assert_eq!(account.settle("bc").await.unwrap(), 3);
    assert_eq!(account.settle_all(&[1, 2]).await.unwrap(), 2);
    assert_eq!(account.close().await.unwrap(), ["a"]);
}
