//! The floors: each store's bare client doing what lock-core's store of it does, and
//! nothing more, one file a store. [`crate::systems`] runs them as systems.

mod mysql;
mod postgres;
mod redis;
mod zookeeper;

pub(crate) use mysql::MySqlFloor;
pub(crate) use postgres::PostgresFloor;
pub(crate) use redis::{LEASE, Raw, connection};
pub(crate) use zookeeper::ZooKeeperLock;
