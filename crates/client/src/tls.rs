//! TLS for the client with rustls: libpq's `sslmode` checks on the server's certificate,
//! `sslrootcert`, and client certificates.

use std::fs;
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore,
    SignatureScheme, StreamOwned,
};

use super::{ClientError, ConnInfo, SslMode};
use pgoutput_wire::Socket;

fn tls_error(text: impl Into<String>) -> ClientError {
    ClientError::Tls(text.into())
}

/// How far the server's certificate is checked.
#[derive(Debug)]
enum Check {
    /// Not at all (`require` without a root certificate): encryption only.
    Nothing,
    /// Signed by a trusted root (`verify-ca`, or `require` with a root certificate).
    Chain(Arc<WebPkiServerVerifier>),
    /// Signed by a trusted root and issued to the host (`verify-full`).
    ChainAndName(Arc<WebPkiServerVerifier>),
}

/// libpq's certificate checks on top of rustls's: the chain always through webpki when a
/// root is given, the name only for `verify-full`. Handshake signatures are always
/// verified, so the peer must hold the key of the certificate it shows.
#[derive(Debug)]
struct Verifier {
    check: Check,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verify = |webpki: &WebPkiServerVerifier| {
            webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        };
        match &self.check {
            Check::Nothing => Ok(ServerCertVerified::assertion()),
            Check::ChainAndName(webpki) => verify(webpki),
            // webpki checks the name only after the chain: a name error means the chain
            // is good, which is all verify-ca asks.
            Check::Chain(webpki) => match verify(webpki) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            },
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The client configuration `info` asks for: its checks, its roots, its certificate.
pub(crate) fn config(info: &ConnInfo) -> Result<Arc<ClientConfig>, ClientError> {
    let provider = Arc::new(ring::default_provider());
    let settings = &info.tls;
    let roots = match &settings.root_cert {
        Some(path) => Some(load_roots(path)?),
        None if matches!(settings.mode, SslMode::VerifyCa | SslMode::VerifyFull) => {
            return Err(tls_error(format!(
                "sslmode={} needs a root certificate to check the server's against: give \
                 sslrootcert= (or put it in ~/.postgresql/root.crt), or use sslmode=require \
                 to encrypt without checking",
                settings.mode
            )))
        }
        None => None,
    };
    let check = match roots {
        None => Check::Nothing,
        Some(roots) => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| tls_error(format!("root certificates: {e}")))?;
            match settings.mode {
                SslMode::VerifyFull => Check::ChainAndName(webpki),
                _ => Check::Chain(webpki),
            }
        }
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier { check, provider }));
    let mut config = match &settings.cert {
        Some(cert) => {
            let key = settings
                .key
                .as_deref()
                .ok_or_else(|| tls_error(format!("sslcert={} needs sslkey=", cert.display())))?;
            let (chain, key) = load_identity(cert, key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_error(format!("client certificate: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    config.enable_sni = settings.sni;
    Ok(Arc::new(config))
}

fn load_roots(path: &Path) -> Result<RootCertStore, ClientError> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_error(format!("sslrootcert {}: {e}", path.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| tls_error(format!("sslrootcert {}: {e}", path.display())))?;
        roots
            .add(cert)
            .map_err(|e| tls_error(format!("sslrootcert {}: {e}", path.display())))?;
    }
    if roots.is_empty() {
        return Err(tls_error(format!(
            "sslrootcert {}: no certificates in it",
            path.display()
        )));
    }
    Ok(roots)
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn load_identity(cert: &Path, key: &Path) -> Result<Identity, ClientError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_error(format!("sslcert {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(tls_error(format!(
            "sslcert {}: no certificates in it",
            cert.display()
        )));
    }
    // libpq's rule: the key may be read by its owner only (or also by the group when
    // root owns it, for keys a system manages).
    let metadata =
        fs::metadata(key).map_err(|e| tls_error(format!("sslkey {}: {e}", key.display())))?;
    let loose = if metadata.uid() == 0 { 0o037 } else { 0o077 };
    if metadata.mode() & loose != 0 {
        return Err(tls_error(format!(
            "private key file {} has group or world access; permissions should be u=rw \
             (0600) or less",
            key.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| tls_error(format!("sslkey {}: {e}", key.display())))?;
    Ok((chain, key))
}

/// Runs the TLS handshake on `tcp` (after the server answered an SSLRequest with `S`).
pub(crate) fn handshake(
    mut tcp: TcpStream,
    info: &ConnInfo,
    config: Arc<ClientConfig>,
) -> Result<Socket, ClientError> {
    let name = ServerName::try_from(info.host.clone())
        .map_err(|e| tls_error(format!("host {:?}: {e}", info.host)))?;
    let mut conn = ClientConnection::new(config, name).map_err(|e| tls_error(e.to_string()))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| {
            // rustls reports its own failures (a refused certificate) as InvalidData
            // wrapping a rustls::Error.
            match e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                Some(err) => tls_error(format!("handshake with {}: {err}", info.host)),
                None => ClientError::Io(e),
            }
        })?;
    }
    Ok(Socket::Tls(Box::new(StreamOwned::new(conn, tcp))))
}
