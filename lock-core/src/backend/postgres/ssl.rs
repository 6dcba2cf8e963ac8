//! The url's TLS settings, `sslmode` and `sslrootcert`, as libpq reads them: read and
//! taken out of the url before tokio-postgres parses the rest, since its parser knows
//! neither `verify-ca`, `verify-full` nor `sslrootcert`.

use std::path::PathBuf;

use percent_encoding::percent_decode_str;

use crate::LockError;

/// How much TLS a connection needs, and how far the server's certificate is checked:
/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum SslMode {
    /// Plain.
    Disable,
    /// TLS if the server offers it, else plain (libpq's default).
    #[default]
    Prefer,
    /// TLS.
    Require,
    /// TLS, the server's certificate signed by a trusted authority.
    VerifyCa,
    /// TLS, the server's certificate signed by a trusted authority and for the host.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, LockError> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => {
                return Err(LockError::Config(format!(
                    "postgres sslmode={value} is not one of disable, prefer, require, \
                     verify-ca, verify-full"
                )));
            }
        })
    }

    /// The mode tokio-postgres negotiates by: whether it asks the server for TLS, and
    /// whether it gives up when the server declines.
    pub(super) fn negotiated(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Negotiated;
        match self {
            Self::Disable => Negotiated::Disable,
            Self::Prefer => Negotiated::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => Negotiated::Require,
        }
    }

    /// The name the url gives it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// The certificate authorities the server's certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Root {
    /// The PEM certificates in this file (`sslrootcert=<path>`).
    File(PathBuf),
    /// The system's (`sslrootcert=system`).
    System,
    /// These PEM certificates, given to the builder.
    #[cfg(feature = "tls")]
    Pem(Vec<u8>),
}

/// The url's TLS settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Ssl {
    pub(super) mode: SslMode,
    pub(super) root: Option<Root>,
}

impl Ssl {
    /// The TLS settings of `url` (either form libpq reads: a `postgres://` url, or
    /// `key=value` pairs), and the url without them. A url that cannot be read is
    /// returned as it is, for tokio-postgres to say what is wrong with it.
    pub(super) fn take(url: &str) -> Result<(String, Ssl), LockError> {
        let mut ssl = Ssl::default();
        let (base, params) = match split_query(url) {
            Some((base, Some(query))) => (Some(base), url_params(query)),
            Some((_, None)) => return Ok((url.to_owned(), ssl)),
            None => (None, key_value_params(url)),
        };
        let Some(params) = params else {
            return Ok((url.to_owned(), ssl));
        };
        let mut kept = Vec::new();
        for param in params {
            match param.key.as_str() {
                "sslmode" => ssl.mode = SslMode::parse(&param.value)?,
                "sslrootcert" if param.value == "system" => ssl.root = Some(Root::System),
                "sslrootcert" => ssl.root = Some(Root::File(param.value.into())),
                _ => kept.push(param.raw),
            }
        }
        let rest = match base {
            Some(base) if kept.is_empty() => base.to_owned(),
            Some(base) => format!("{base}?{}", kept.join("&")),
            None => kept.join(" "),
        };
        Ok((rest, ssl))
    }
}

/// One parameter of a url: its key and value, decoded, and its text in the url.
struct Param<'a> {
    key: String,
    value: String,
    raw: &'a str,
}

/// A `postgres://` url split at its query's `?`, as tokio-postgres splits it: the first
/// `?` after the credentials (which end at the first `@`); `None` for the `key=value`
/// form.
fn split_query(url: &str) -> Option<(&str, Option<&str>)> {
    let rest = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))?;
    let credentials = rest.find('@').map_or(0, |at| at + 1);
    let Some(question) = rest[credentials..].find('?') else {
        return Some((url, None));
    };
    let at = url.len() - rest.len() + credentials + question;
    Some((&url[..at], Some(&url[at + 1..])))
}

/// The query's parameters, `&`-separated and percent-encoded.
fn url_params(query: &str) -> Option<Vec<Param<'_>>> {
    let decode = |s: &str| percent_decode_str(s).decode_utf8().map(String::from).ok();
    query
        .split('&')
        .map(|raw| {
            let (key, value) = raw.split_once('=')?;
            Some(Param {
                key: decode(key)?,
                value: decode(value)?,
                raw,
            })
        })
        .collect()
}

/// The parameters of libpq's `key = value` form, whitespace-separated, a value either
/// bare or in single quotes, `\` escaping the character after it.
fn key_value_params(url: &str) -> Option<Vec<Param<'_>>> {
    let mut params = Vec::new();
    let mut chars = url.char_indices().peekable();
    let skip_whitespace = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    skip_whitespace(&mut chars);
    while let Some(&(start, _)) = chars.peek() {
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|&(_, c)| c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        skip_whitespace(&mut chars);
        chars.next_if(|&(_, c)| c == '=')?;
        skip_whitespace(&mut chars);
        let quoted = chars.next_if(|&(_, c)| c == '\'').is_some();
        let mut value = String::new();
        let end = loop {
            match chars.next() {
                Some((at, '\'')) if quoted => break at + 1,
                Some((at, c)) if c.is_whitespace() && !quoted => break at,
                Some((_, '\\')) => value.push(chars.next()?.1),
                Some((_, c)) => value.push(c),
                None if quoted => return None,
                None => break url.len(),
            }
        };
        skip_whitespace(&mut chars);
        params.push(Param {
            key,
            value,
            raw: &url[start..end],
        });
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(url: &str) -> (String, Ssl) {
        Ssl::take(url).unwrap()
    }

    #[test]
    fn a_url_without_settings_is_left_as_it_is() {
        for url in [
            "postgres://u:p@h:5432/db",
            "postgres://u:p@h:5432/db?application_name=x",
            "host=h user=u dbname=db",
            "",
        ] {
            assert_eq!(take(url), (url.to_owned(), Ssl::default()), "{url}");
        }
    }

    #[test]
    fn the_settings_are_taken_out_of_a_url() {
        let (rest, ssl) =
            take("postgres://u:p@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem");
        assert_eq!(rest, "postgres://u:p@h/db");
        assert_eq!(ssl.mode, SslMode::VerifyFull);
        assert_eq!(ssl.root, Some(Root::File("/etc/ca.pem".into())));

        let (rest, ssl) = take("postgresql://h/db?application_name=a&sslmode=verify-ca&port=1");
        assert_eq!(rest, "postgresql://h/db?application_name=a&port=1");
        assert_eq!(ssl.mode, SslMode::VerifyCa);

        let (rest, ssl) = take("postgres://h/db?sslrootcert=system&connect_timeout=3");
        assert_eq!(rest, "postgres://h/db?connect_timeout=3");
        assert_eq!((ssl.mode, ssl.root), (SslMode::Prefer, Some(Root::System)));
    }

    #[test]
    fn the_settings_are_taken_out_of_key_value_pairs() {
        let (rest, ssl) =
            take("host=h sslmode = require  sslrootcert='/my certs/ca.pem' dbname=db");
        assert_eq!(rest, "host=h dbname=db");
        assert_eq!(ssl.mode, SslMode::Require);
        assert_eq!(ssl.root, Some(Root::File("/my certs/ca.pem".into())));

        let (rest, ssl) = take("password='it\\'s' sslmode=disable");
        assert_eq!(rest, "password='it\\'s'");
        assert_eq!(ssl.mode, SslMode::Disable);
    }

    #[test]
    fn the_last_mode_given_counts_and_an_unknown_one_is_refused() {
        assert_eq!(
            take("sslmode=disable sslmode=verify-ca").1.mode,
            SslMode::VerifyCa
        );
        let err = Ssl::take("postgres://h/db?sslmode=allow").unwrap_err();
        assert!(err.is_config(), "{err}");
        assert!(err.to_string().contains("sslmode=allow"), "{err}");
    }

    #[test]
    fn the_rest_reads_as_tokio_postgres_reads_it() {
        use std::str::FromStr;
        for url in [
            "postgres://u@h:1/db?sslmode=verify-full&application_name=a",
            "host=h port=1 sslmode=verify-ca sslrootcert=/ca.pem user=u",
        ] {
            let (rest, _) = take(url);
            tokio_postgres::Config::from_str(&rest).unwrap_or_else(|e| panic!("{rest}: {e}"));
        }
    }
}
