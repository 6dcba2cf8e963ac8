//! Connection urls as messages and `Debug` show them: never with a password.

/// Strips the user name and password from a URL (`scheme://user:password@host...`), for
/// messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***@{}", &url[..scheme_end], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_credentials() {
        assert_eq!(
            redact("redis://user:secret@db.internal:6380/2"),
            "redis://***@db.internal:6380/2"
        );
        assert_eq!(redact("redis://:p@ss@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
