//! A minimal RESP2 encoder and reply parser, enough to drive a test server.

use std::io::BufRead;

use crate::HarnessError;

/// Nesting limit for arrays, so a malformed reply cannot overflow the stack.
const MAX_DEPTH: usize = 64;

/// A RESP2 reply.
///
/// Error replies (`-ERR ...`) are values, not `Err`: [`RedisServer::cmd`](crate::RedisServer::cmd)
/// returns `Ok(Resp::Error(..))` for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    /// A simple string, e.g. `+OK`.
    Simple(String),
    /// An error reply, e.g. `-ERR unknown command`, without the leading `-`.
    Error(String),
    /// An integer, e.g. `:1`.
    Int(i64),
    /// A bulk string; `None` is the nil bulk string `$-1`.
    Bulk(Option<Vec<u8>>),
    /// An array; `None` is the nil array `*-1`.
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// The text of a simple string, or of a bulk string that is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Resp::Simple(s) => Some(s),
            Resp::Bulk(Some(bytes)) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Resp::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a simple or (non-nil) bulk string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Resp::Simple(s) => Some(s.as_bytes()),
            Resp::Bulk(Some(bytes)) => Some(bytes),
            _ => None,
        }
    }

    /// The elements of a non-nil array.
    pub fn as_array(&self) -> Option<&[Resp]> {
        match self {
            Resp::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// The message of an error reply, e.g. `ERR unknown command ...` or `MOVED 3999 127.0.0.1:6381`.
    pub fn as_error(&self) -> Option<&str> {
        match self {
            Resp::Error(message) => Some(message),
            _ => None,
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Resp::Error(_))
    }

    /// Whether this is the nil bulk string or the nil array.
    pub fn is_nil(&self) -> bool {
        matches!(self, Resp::Bulk(None) | Resp::Array(None))
    }

    /// Reads one reply from `reader`.
    ///
    /// A read timeout on the underlying stream surfaces as an error for which
    /// [`HarnessError::is_timeout`] is true.
    pub fn read_from(reader: &mut impl BufRead) -> Result<Resp, HarnessError> {
        read_value(reader, 0)
    }
}

/// Encodes a command as a RESP2 array of bulk strings, ready to write to a socket.
///
/// ```
/// assert_eq!(lock_tests::encode_command(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
/// ```
pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        let arg = arg.as_ref();
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn read_value(reader: &mut impl BufRead, depth: usize) -> Result<Resp, HarnessError> {
    let line = read_line(reader)?;
    let (kind, rest) = match line.split_first() {
        Some((kind, rest)) => (*kind, rest),
        None => return Err(HarnessError::Protocol("empty line".to_owned())),
    };
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Resp::Simple(text())),
        b'-' => Ok(Resp::Error(text())),
        b':' => parse_int(rest).map(Resp::Int),
        b'$' => {
            let len = parse_int(rest)?;
            if len < 0 {
                return Ok(Resp::Bulk(None));
            }
            let len = usize::try_from(len)
                .map_err(|_| HarnessError::Protocol(format!("bulk length {len} too large")))?;
            let mut buf = vec![0; len + 2];
            reader
                .read_exact(&mut buf)
                .map_err(|e| HarnessError::io("read a RESP bulk string", e))?;
            if !buf.ends_with(b"\r\n") {
                return Err(HarnessError::Protocol(
                    "bulk string not terminated by CRLF".to_owned(),
                ));
            }
            buf.truncate(len);
            Ok(Resp::Bulk(Some(buf)))
        }
        b'*' => {
            let len = parse_int(rest)?;
            if len < 0 {
                return Ok(Resp::Array(None));
            }
            if depth >= MAX_DEPTH {
                return Err(HarnessError::Protocol(format!(
                    "arrays nested deeper than {MAX_DEPTH}"
                )));
            }
            // Each element takes at least 3 bytes, so do not trust the length for capacity.
            let mut items = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1024));
            for _ in 0..len {
                items.push(read_value(reader, depth + 1)?);
            }
            Ok(Resp::Array(Some(items)))
        }
        other => Err(HarnessError::Protocol(format!(
            "unexpected type byte {:?}",
            char::from(other)
        ))),
    }
}

/// Reads a line up to CRLF and returns it without the CRLF.
fn read_line(reader: &mut impl BufRead) -> Result<Vec<u8>, HarnessError> {
    let mut line = Vec::new();
    let n = reader
        .read_until(b'\n', &mut line)
        .map_err(|e| HarnessError::io("read a RESP reply", e))?;
    if n == 0 {
        return Err(HarnessError::io(
            "read a RESP reply",
            std::io::ErrorKind::UnexpectedEof.into(),
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(HarnessError::Protocol(format!(
            "line not terminated by CRLF: {:?}",
            String::from_utf8_lossy(&line)
        )));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(digits: &[u8]) -> Result<i64, HarnessError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            HarnessError::Protocol(format!(
                "invalid integer {:?}",
                String::from_utf8_lossy(digits)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Resp, HarnessError> {
        Resp::read_from(&mut &bytes[..])
    }

    #[test]
    fn parses_every_type() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Resp::Simple("OK".into()));
        assert_eq!(parse(b"-ERR x\r\n").unwrap(), Resp::Error("ERR x".into()));
        assert_eq!(parse(b":-42\r\n").unwrap(), Resp::Int(-42));
        assert_eq!(
            parse(b"$5\r\na\r\nbc\r\n").unwrap(),
            Resp::Bulk(Some(b"a\r\nbc".to_vec()))
        );
        assert!(parse(b"$-1\r\n").unwrap().is_nil());
        assert!(parse(b"*-1\r\n").unwrap().is_nil());
        assert_eq!(
            parse(b"*2\r\n:1\r\n*1\r\n$0\r\n\r\n").unwrap(),
            Resp::Array(Some(vec![
                Resp::Int(1),
                Resp::Array(Some(vec![Resp::Bulk(Some(Vec::new()))]))
            ]))
        );
    }

    #[test]
    fn rejects_malformed_replies() {
        assert!(matches!(parse(b"?x\r\n"), Err(HarnessError::Protocol(_))));
        assert!(matches!(parse(b":abc\r\n"), Err(HarnessError::Protocol(_))));
        assert!(matches!(parse(b"+OK\n"), Err(HarnessError::Protocol(_))));
        assert!(matches!(
            parse(b"$3\r\nabcXY"),
            Err(HarnessError::Protocol(_))
        ));
        assert!(matches!(parse(b""), Err(HarnessError::Io { .. })));
        assert!(matches!(
            parse(b"*2\r\n:1\r\n"),
            Err(HarnessError::Io { .. })
        ));
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(matches!(
            parse(deep.as_bytes()),
            Err(HarnessError::Protocol(_))
        ));
    }

    #[test]
    fn helpers() {
        let bulk = Resp::Bulk(Some(b"v".to_vec()));
        assert_eq!(bulk.as_str(), Some("v"));
        assert_eq!(bulk.as_bytes(), Some(&b"v"[..]));
        assert_eq!(bulk.as_int(), None);
        assert_eq!(Resp::Int(3).as_int(), Some(3));
        assert!(Resp::Error("ERR".into()).is_error());
        assert_eq!(Resp::Error("ERR".into()).as_str(), None);
        assert!(!Resp::Bulk(Some(Vec::new())).is_nil());
    }
}
