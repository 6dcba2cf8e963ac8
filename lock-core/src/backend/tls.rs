//! What the database stores' TLS settings share: reading a certificate authority.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::LockError;

/// The certificates of `pem` (one or more PEM certificates), said to be `what` in an error:
/// at least one, each well formed.
pub(crate) fn certificates(
    pem: &[u8],
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, LockError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LockError::Config(format!("{what} is not a valid PEM certificate: {e}")))?;
    if certificates.is_empty() {
        return Err(LockError::Config(format!(
            "{what} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(certificates)
}
