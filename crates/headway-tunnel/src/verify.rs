//! Certificate verifiers that accept exactly the pinned fingerprints, in both directions.
//!
//! This module owns the TLS 1.3 (RFC 8446) authentication policy of the tunnel: each side holds
//! the SHA-256 fingerprints of the certificates it trusts; a certificate whose fingerprint is not
//! among them is refused, whatever its names, issuer or validity dates (self-signed certificates
//! are the norm, and no CA is involved). The handshake signature is still checked against the
//! presented certificate (RFC 8446 §4.4.3), which proves the peer holds the matching key.
//!
//! It does not build the TLS configs (the endpoint does) and knows nothing about QUIC.

use std::fmt;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme,
};

use crate::identity::Fingerprint;

/// The crypto provider the tunnel uses, set explicitly rather than through rustls' process-wide
/// default, so that another crate enabling a second provider changes nothing here.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// A certificate whose fingerprint is not pinned.
#[derive(thiserror::Error)]
#[error("{role} certificate fingerprint {got} is not pinned{}", expected_text(.expected))]
pub struct NotPinned {
    /// `"server"` or `"client"`: whose certificate was refused.
    pub role: &'static str,
    /// The fingerprint presented.
    pub got: Fingerprint,
    /// The fingerprint expected, when exactly one was.
    pub expected: Option<Fingerprint>,
}

impl fmt::Debug for NotPinned {
    // rustls and quinn put the Debug form into the handshake error's text: make it the message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

fn expected_text(expected: &Option<Fingerprint>) -> String {
    match expected {
        Some(f) => format!(" (expected {f})"),
        None => " for any configured peer".to_owned(),
    }
}

fn refuse(role: &'static str, got: Fingerprint, expected: Option<Fingerprint>) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(NotPinned {
        role,
        got,
        expected,
    }))))
}

/// Client side: accepts the server certificate with exactly one fingerprint.
pub(crate) struct PinnedServer {
    pinned: Fingerprint,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinnedServer {
    pub(crate) fn new(pinned: Fingerprint) -> Self {
        Self {
            pinned,
            algorithms: provider().signature_verification_algorithms,
        }
    }
}

impl fmt::Debug for PinnedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedServer")
            .field("pinned", &self.pinned)
            .finish()
    }
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = Fingerprint::of(end_entity);
        if got == self.pinned {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(refuse("server", got, Some(self.pinned)))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Server side: demands a client certificate and accepts any of the peers' fingerprints.
pub(crate) struct PinnedClients {
    pinned: Vec<Fingerprint>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinnedClients {
    pub(crate) fn new(pinned: Vec<Fingerprint>) -> Self {
        Self {
            pinned,
            algorithms: provider().signature_verification_algorithms,
        }
    }
}

impl fmt::Debug for PinnedClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedClients")
            .field("pinned", &self.pinned)
            .finish()
    }
}

impl ClientCertVerifier for PinnedClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let got = Fingerprint::of(end_entity);
        if self.pinned.contains(&got) {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(refuse("client", got, None))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
