//! Every option, `<arg>` placeholders, field paths, escaped braces, escaped values.

use std::sync::Arc;

use lock_core::{LockError, Locker, distributed_lock};

struct Order {
    id: u64,
    customer: (String, u32),
}

#[distributed_lock(
    key = "{{order}}:<order.id>:{order.customer.0}:{order.customer.1}",
    locker = locker,
    wait = "250ms",
    lease = "1m30s",
    watchdog = false,
    mode = "fair",
    guard = lock,
    crate = "::lock_core"
)]
async fn ship(locker: Arc<Locker>, order: &Order) -> Result<String, LockError> {
    Ok(lock.key().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Arc::new(Locker::in_memory());
    let order = Order {
        id: 7,
        customer: ("ada:lovelace".to_owned(), 3),
    };
    assert_eq!(ship(locker, &order).await.unwrap(), "{order}:7:ada%3Alovelace:3");
}
