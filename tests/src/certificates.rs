//! Certificates for a server's TLS, made with `openssl`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::HarnessError;
use crate::daemon::not_installed;
use crate::process::Captured;

/// The Debian package with `openssl`.
const PACKAGE: &str = "openssl";
/// How long one `openssl` command may take.
const OPENSSL_TIMEOUT: Duration = Duration::from_secs(30);
/// The names the certificate is for.
const SUBJECT_ALT_NAME: &str = "subjectAltName=IP:127.0.0.1\n";

/// A certificate authority of its own (`ca.crt`) and a certificate for `127.0.0.1` that it
/// signed (`server.crt`, its key `server.key`, readable by its owner only), made with
/// `openssl` in a dir, valid for a day.
///
/// ```no_run
/// let dir = std::env::temp_dir().join("my-test-certificates");
/// std::fs::create_dir_all(&dir).unwrap();
/// let certificates = lock_tests::Certificates::make(&dir);
/// let trusted = certificates.authority_pem(); // for a client's `tls_root_certificate`
/// # let _ = trusted;
/// ```
#[derive(Debug, Clone)]
pub struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    /// Makes them in `dir`, which exists.
    ///
    /// # Panics
    ///
    /// If `openssl` is not installed (the message says how to install it) or fails.
    #[track_caller]
    pub fn make(dir: &Path) -> Certificates {
        Self::make_with(dir, |program| Command::new(program)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Makes them in `dir`, running `openssl` as `command` makes it run (as a server's
    /// account, so that the files are its own).
    pub(crate) fn make_with(
        dir: &Path,
        command: impl Fn(&Path) -> Command,
    ) -> Result<Certificates, HarnessError> {
        let openssl = |args: &str| {
            let mut openssl = command(Path::new("openssl"));
            openssl.args(args.split_whitespace()).current_dir(dir);
            let what = format!("openssl {args}");
            let run = Captured::spawn(&mut openssl, what, |program, e| {
                not_installed(program, e, PACKAGE)
            })?;
            run.wait(Instant::now() + OPENSSL_TIMEOUT).map(drop)
        };
        let written = |path: PathBuf, contents: &str| {
            fs::write(&path, contents)
                .map_err(|e| HarnessError::io(format!("write {}", path.display()), e))
        };
        written(dir.join("san.ext"), SUBJECT_ALT_NAME)?;
        openssl(
            "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=lock-tests-authority \
             -keyout ca.key -out ca.crt",
        )?;
        openssl(
            "req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr",
        )?;
        openssl(
            "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
             -extfile san.ext -out server.crt",
        )?;
        let certificates = Certificates {
            dir: dir.to_path_buf(),
        };
        // PostgreSQL refuses a key that others may read.
        let key = certificates.key();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600))
            .map_err(|e| HarnessError::io(format!("chmod {}", key.display()), e))?;
        Ok(certificates)
    }

    /// The authority's certificate, `ca.crt`.
    pub fn authority(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The authority's certificate, as PEM.
    ///
    /// # Panics
    ///
    /// If it cannot be read.
    pub fn authority_pem(&self) -> Vec<u8> {
        let path = self.authority();
        fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    }

    /// The server's certificate, `server.crt`.
    pub fn certificate(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    /// The server's key, `server.key`.
    pub fn key(&self) -> PathBuf {
        self.dir.join("server.key")
    }
}
