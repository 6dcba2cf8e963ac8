//! What tests read out of a reply, which is redis-rs's [`Value`].

use redis::Value;

/// The text and the numbers of a reply from [`RedisServer::cmd`](crate::RedisServer::cmd).
pub trait ValueExt {
    /// The text of a simple string (`OK` too), or of a bulk string that is valid UTF-8.
    fn as_str(&self) -> Option<&str>;

    /// The value of an integer reply.
    fn as_int(&self) -> Option<i64>;
}

impl ValueExt for Value {
    fn as_str(&self) -> Option<&str> {
        match self {
            Value::Okay => Some("OK"),
            Value::SimpleString(text) => Some(text),
            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }
}
