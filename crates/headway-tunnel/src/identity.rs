//! Appliance identities: a self-signed certificate and its key, and the certificate's SHA-256
//! fingerprint that the peer pins.
//!
//! This module owns generating ([`Identity::generate`]), loading ([`Identity::from_pem`],
//! [`Identity::load`]) and saving ([`Identity::save`]) identities, and the [`Fingerprint`] text
//! form an operator copies into the peer's config. It does not verify anything (see `verify`).
//!
//! Fingerprints are keyed per deployment in the sense that each appliance generates its own key
//! pair; nothing is shared between deployments, and a fingerprint is worthless without the key.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

/// The name put in generated certificates. Peers never check it: they pin the fingerprint.
pub const CERT_NAME: &str = "headway-appliance";

/// Why an identity could not be created, loaded or saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// Key or certificate generation failed.
    #[error("generating the certificate failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// The certificate PEM holds no certificate or is malformed.
    #[error("no certificate in the certificate pem: {0}")]
    CertificatePem(rustls::pki_types::pem::Error),
    /// The key PEM holds no private key or is malformed.
    #[error("no private key in the key pem: {0}")]
    KeyPem(rustls::pki_types::pem::Error),
    /// The private key is of a kind the crypto provider cannot sign with.
    #[error("unusable private key: {0}")]
    Key(rustls::Error),
    /// Reading or writing a PEM file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A certificate and its private key, with their PEM text.
pub struct Identity {
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    cert_pem: String,
    key_pem: String,
}

impl Identity {
    /// A new self-signed certificate with a fresh ECDSA P-256 key (from the OS RNG, through
    /// ring: key generation is the one place randomness must not be seeded).
    pub fn generate() -> Result<Self, IdentityError> {
        let ck = rcgen::generate_simple_self_signed(vec![CERT_NAME.to_owned()])?;
        Self::from_pem(&ck.cert.pem(), &ck.signing_key.serialize_pem())
    }

    /// An identity from PEM text: the first certificate of `cert_pem` and the first private
    /// key (PKCS#8, PKCS#1 or SEC1) of `key_pem`.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, IdentityError> {
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(IdentityError::CertificatePem)?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(IdentityError::KeyPem)?;
        crate::verify::provider()
            .key_provider
            .load_private_key(key.clone_key())
            .map_err(IdentityError::Key)?;
        Ok(Self {
            cert,
            key,
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        })
    }

    /// Reads the two PEM files.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, IdentityError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| IdentityError::Io {
                path: p.display().to_string(),
                source,
            })
        };
        Self::from_pem(&read(cert_path)?, &read(key_path)?)
    }

    /// Writes the two PEM files; the key file is created readable by its owner only.
    pub fn save(&self, cert_path: &Path, key_path: &Path) -> Result<(), IdentityError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let io = |p: &Path| {
            let path = p.display().to_string();
            move |source| IdentityError::Io { path, source }
        };
        std::fs::write(cert_path, &self.cert_pem).map_err(io(cert_path))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(key_path)
            .map_err(io(key_path))?;
        f.write_all(self.key_pem.as_bytes()).map_err(io(key_path))
    }

    /// The SHA-256 fingerprint of the certificate, for the peer's config.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.cert)
    }

    /// The certificate, PEM-encoded.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PEM-encoded.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    pub(crate) fn cert(&self) -> CertificateDer<'static> {
        self.cert.clone()
    }

    pub(crate) fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }

    /// A secret derived from the private key for `label` (HMAC-SHA256 under the key): the
    /// same after a restart, different per appliance and per label.
    fn derive(&self, label: &[u8]) -> ring::hmac::Tag {
        let secret = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, self.key.secret_der());
        ring::hmac::sign(&secret, label)
    }

    /// The key QUIC stateless-reset tokens are signed with, and the key local connection IDs
    /// are hashed with, both derived from the identity so that they survive a restart. A
    /// restarted appliance then recognises the connection IDs its previous process issued as
    /// its own and resets at once the connections that process held (the peer checks the
    /// token it was given for that ID), instead of the peer sending into a dead connection
    /// until its idle timeout.
    pub(crate) fn stateless_reset_keys(&self) -> (ring::hmac::Key, u64) {
        let reset = self.derive(b"headway-tunnel stateless reset key v1");
        let cid = self.derive(b"headway-tunnel connection id key v1");
        let mut cid_key = [0u8; 8];
        cid_key.copy_from_slice(&cid.as_ref()[..8]);
        (
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset.as_ref()),
            u64::from_le_bytes(cid_key),
        )
    }
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self {
            cert: self.cert.clone(),
            key: self.key.clone_key(),
            cert_pem: self.cert_pem.clone(),
            key_pem: self.key_pem.clone(),
        }
    }
}

impl fmt::Debug for Identity {
    // Never print the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

/// The SHA-256 digest of a DER certificate. Text form: 64 lowercase hex digits; parsing also
/// accepts upper case, `:` separators and a `sha256:` prefix, as other tools print them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of `cert_der`.
    pub fn of(cert_der: &[u8]) -> Self {
        Self(Sha256::digest(cert_der).into())
    }
}

/// Why a fingerprint's text form was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FingerprintError {
    /// Not 64 hex digits after removing the prefix and separators.
    #[error("a fingerprint is 64 hex digits (sha-256), got {0}")]
    Length(usize),
    /// A character that is not a hex digit.
    #[error("invalid hex digit {0:?} in fingerprint")]
    Digit(char),
}

impl FromStr for Fingerprint {
    type Err = FingerprintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let s = s
            .strip_prefix("sha256:")
            .or_else(|| s.strip_prefix("SHA256:"))
            .unwrap_or(s);
        let digits: Vec<char> = s.chars().filter(|c| *c != ':').collect();
        if digits.len() != 64 {
            return Err(FingerprintError::Length(digits.len()));
        }
        let mut out = [0u8; 32];
        for (i, pair) in digits.chunks(2).enumerate() {
            let hi = pair[0]
                .to_digit(16)
                .ok_or(FingerprintError::Digit(pair[0]))?;
            let lo = pair[1]
                .to_digit(16)
                .ok_or(FingerprintError::Digit(pair[1]))?;
            // Two hex digits always fit a byte.
            out[i] = (hi * 16 + lo) as u8;
        }
        Ok(Self(out))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fingerprint_text_round_trip(bytes in any::<[u8; 32]>()) {
            let f = Fingerprint(bytes);
            prop_assert_eq!(f.to_string().parse::<Fingerprint>(), Ok(f));
            let colons: Vec<String> = bytes.iter().map(|b| format!("{b:02X}")).collect();
            let text = format!("sha256:{}", colons.join(":"));
            prop_assert_eq!(text.parse::<Fingerprint>(), Ok(f));
        }

        #[test]
        fn fingerprint_parser_never_panics(s in "\\PC{0,80}") {
            let _ = s.parse::<Fingerprint>();
        }
    }

    #[test]
    fn bad_fingerprints_are_refused() {
        assert_eq!(
            "ab".parse::<Fingerprint>(),
            Err(FingerprintError::Length(2))
        );
        let bad = "g".repeat(64);
        assert_eq!(
            bad.parse::<Fingerprint>(),
            Err(FingerprintError::Digit('g'))
        );
    }

    #[test]
    fn generated_identity_survives_pem_and_files() {
        let id = Identity::generate().unwrap();
        let again = Identity::from_pem(id.cert_pem(), id.key_pem()).unwrap();
        assert_eq!(again.fingerprint(), id.fingerprint());
        assert_ne!(
            Identity::generate().unwrap().fingerprint(),
            id.fingerprint()
        );

        let dir = std::env::temp_dir().join(format!("headway-tunnel-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        id.save(&c, &k).unwrap();
        let loaded = Identity::load(&c, &k).unwrap();
        assert_eq!(loaded.fingerprint(), id.fingerprint());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn garbage_pem_is_refused() {
        let id = Identity::generate().unwrap();
        assert!(matches!(
            Identity::from_pem("nope", id.key_pem()),
            Err(IdentityError::CertificatePem(_))
        ));
        assert!(matches!(
            Identity::from_pem(id.cert_pem(), id.cert_pem()),
            Err(IdentityError::KeyPem(_))
        ));
    }
}
