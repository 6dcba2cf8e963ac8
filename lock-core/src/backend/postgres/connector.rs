//! The connector a store's sessions open TLS through: rustls's (`tls.rs`) with the
//! `tls` feature; without it, none, and a url that asks for TLS is refused.

use super::ssl::Ssl;
#[cfg(not(feature = "tls"))]
use super::ssl::SslMode;
use crate::LockError;

/// The connector tokio-postgres opens TLS through.
#[cfg(feature = "tls")]
pub(super) type Tls = super::tls::MakeTls;
/// No TLS: without the `tls` feature, only the url's `disable` and `prefer` modes
/// connect, plainly.
#[cfg(not(feature = "tls"))]
pub(super) type Tls = tokio_postgres::NoTls;

/// The connector for the settings `ssl`.
#[cfg(feature = "tls")]
pub(super) fn connector(ssl: &Ssl) -> Result<Tls, LockError> {
    super::tls::MakeTls::new(ssl)
}

/// No TLS; `Config` if the settings `ssl` ask for it.
#[cfg(not(feature = "tls"))]
pub(super) fn connector(ssl: &Ssl) -> Result<Tls, LockError> {
    let asks = match ssl.mode {
        SslMode::Disable | SslMode::Prefer => ssl.root.as_ref().map(|_| "sslrootcert".into()),
        mode => Some(format!("sslmode={}", mode.name())),
    };
    match asks {
        Some(setting) => Err(LockError::Config(format!(
            "postgres {setting} needs TLS, which needs lock-core's `tls` feature"
        ))),
        None => Ok(tokio_postgres::NoTls),
    }
}
