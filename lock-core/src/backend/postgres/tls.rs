//! TLS to the server, by rustls: the client configuration that the url's `sslmode` and
//! the trusted authorities make, and the connector tokio-postgres opens TLS through.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::TlsConnector;

use super::ssl::{Root, Ssl, SslMode};
use crate::LockError;
use crate::backend::tls::certificates;

/// Opens TLS as the url's `sslmode` says, checking the server's certificate as libpq
/// does: `verify-full` its chain and host name, `verify-ca` its chain, and `prefer` and
/// `require` its chain only when a root certificate is given.
#[derive(Clone)]
pub(crate) struct MakeTls {
    config: Arc<ClientConfig>,
}

impl MakeTls {
    /// The connector for `ssl`; `Config` if its authorities cannot be read.
    pub(super) fn new(ssl: &Ssl) -> Result<MakeTls, LockError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| LockError::Config(format!("postgres tls: {e}")))?;
        let root = match (&ssl.root, ssl.mode) {
            (Some(root), _) => Some(root),
            (None, SslMode::VerifyCa | SslMode::VerifyFull) => Some(&Root::System),
            (None, _) => None,
        };
        let roots = root.map(|root| trusted(root, ssl.mode)).transpose()?;
        let config = match roots {
            Some(roots) if ssl.mode == SslMode::VerifyFull => builder.with_root_certificates(roots),
            roots => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly {
                    roots: roots.map(Arc::new),
                    algorithms,
                })),
        };
        Ok(MakeTls {
            config: Arc::new(config.with_no_client_auth()),
        })
    }
}

impl fmt::Debug for MakeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MakeTls").finish_non_exhaustive()
    }
}

/// The authorities of `root`, for a connection in `mode`.
fn trusted(root: &Root, mode: SslMode) -> Result<RootCertStore, LockError> {
    let mut store = RootCertStore::empty();
    let (pem, what) = match root {
        Root::Pem(pem) => (
            Cow::Borrowed(&pem[..]),
            "the postgres tls root certificate".to_owned(),
        ),
        Root::File(path) => {
            let what = format!("postgres sslrootcert={}", path.display());
            let pem = std::fs::read(path)
                .map_err(|e| LockError::Config(format!("{what} cannot be read: {e}")))?;
            (Cow::Owned(pem), what)
        }
        Root::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(LockError::Config(format!(
                    "postgres sslmode={}: no certificate authority found on this system; \
                     give one with sslrootcert=<file> or tls_root_certificate",
                    mode.name()
                )));
            }
            return Ok(store);
        }
    };
    for certificate in certificates(&pem, &what)? {
        store
            .add(certificate)
            .map_err(|e| LockError::Config(format!("{what}: {e}")))?;
    }
    Ok(store)
}

/// Checks the server's certificate chain against `roots`, not its host name; with no
/// roots, checks nothing of it (libpq's `require` without a root certificate). The
/// handshake's signatures are checked either way.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<Arc<RootCertStore>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let certificate = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &certificate,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, certificate, signature, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, certificate, signature, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl MakeTlsConnect<Socket> for MakeTls {
    type Stream = TlsStream;
    type TlsConnect = Handshake;
    type Error = std::convert::Infallible;

    fn make_tls_connect(&mut self, host: &str) -> Result<Handshake, Self::Error> {
        Ok(Handshake {
            host: host.to_owned(),
            connector: TlsConnector::from(self.config.clone()),
        })
    }
}

/// The TLS handshake with the server `host`.
pub(crate) struct Handshake {
    host: String,
    connector: TlsConnector,
}

impl TlsConnect<Socket> for Handshake {
    type Stream = TlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream>> + Send>>;

    /// The host is read as a name or an address here, not when the handshake is made
    /// ready: over a unix socket there is no host name, and the server declines TLS there,
    /// so no handshake starts.
    fn connect(self, socket: Socket) -> Self::Future {
        Box::pin(async move {
            let name = ServerName::try_from(self.host)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let stream = self.connector.connect(name, socket).await?;
            Ok(TlsStream(stream))
        })
    }
}

/// A connection to the server over TLS.
pub(crate) struct TlsStream(tokio_rustls::client::TlsStream<Socket>);

/// No channel binding: SCRAM authenticates without it (`channel_binding=prefer`, the
/// default).
impl tokio_postgres::tls::TlsStream for TlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
