//! The ADC's TLS material, validated: `[[certificate]]` files read and checked, CA bundles,
//! and the TLS settings of `https` virtual servers (`[virtual_server.tls]`) and of server
//! groups (`[server_group.tls]`).
//!
//! This module owns [`Certificate`] (a chain, its key and the X.509 details `headway ctl certs`
//! shows), [`CaBundle`], [`VsTls`], [`GroupTls`] and the checks that make them: each PEM file is
//! read (at most 1 MiB) and parsed, the leaf certificate must be well-formed X.509, the key
//! must be one the TLS stack can sign with (RSA ≥ 2048 bits, ECDSA P-256/P-384, Ed25519, with
//! the aws-lc-rs provider the proxy uses) and must belong to the leaf certificate, and every CA
//! certificate must be usable as a trust anchor. Every error points at the line that names the
//! file, names the file, and says what to change. Nothing here builds a TLS configuration or
//! opens a socket: `headway-proxy` turns these types into rustls configurations, once per
//! config generation.
//!
//! Entry points: `crate::adc::adc` calls `certificate` for each `[[certificate]]`, then
//! `vs_tls` and `group_tls` for the sections that use them.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use toml::Spanned;
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_PKCS1_RSAENCRYPTION,
    OID_SIG_ED25519,
};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::config::{invalid, ConfigError};
use crate::file::{CertificateSection, GroupTlsSection, Origin, VsTlsSection};
use crate::suggest::did_you_mean;
use crate::wanopt::{file_error, read_limited, resolve};

/// Largest certificate, key or CA file read: 1 MiB.
const MAX_PEM_FILE: u64 = 1 << 20;
/// Default size of a virtual server's session cache, in sessions.
pub const DEFAULT_SESSION_CACHE: usize = 20_000;

/// A certificate chain and its private key, read from `[[certificate]]`'s files and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Certificate {
    /// Its name (unique among `[[certificate]]`s).
    pub name: String,
    /// The certificate file, resolved against the config file's directory.
    pub cert_file: PathBuf,
    /// The key file, resolved likewise.
    pub key_file: PathBuf,
    /// The chain, leaf first (at least one certificate).
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key (it matches the leaf's public key).
    pub key: PrivateKey,
    /// What the leaf says about itself.
    pub info: CertificateInfo,
}

/// A private key. `Debug` does not print it; equal when the DER bytes are.
#[derive(Clone)]
pub struct PrivateKey(Arc<PrivateKeyDer<'static>>);

impl PrivateKey {
    /// The key as rustls takes it.
    pub fn der(&self) -> &PrivateKeyDer<'static> {
        &self.0
    }
}

impl PartialEq for PrivateKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.secret_der() == other.0.secret_der()
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(..)")
    }
}

/// The leaf certificate's details, as `headway ctl certs` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateInfo {
    /// The subject's distinguished name (`CN=www.example.com, O=Example`).
    pub subject: String,
    /// The issuer's distinguished name.
    pub issuer: String,
    /// The DNS names of its subjectAltName, lower case, in certificate order; wildcards are
    /// written `*.example.com`. These are the names SNI selects it by.
    pub dns_names: Vec<String>,
    /// The IP addresses of its subjectAltName.
    pub ip_addresses: Vec<IpAddr>,
    /// Start of validity, seconds since the Unix epoch.
    pub not_before: i64,
    /// End of validity (expiry), seconds since the Unix epoch.
    pub not_after: i64,
    /// The serial number in hex, bytes separated by `:`.
    pub serial: String,
    /// The key type and size: `ECDSA P-256`, `ECDSA P-384`, `RSA 2048`, `Ed25519`.
    pub key_type: String,
}

/// CA certificates to verify peers' certificates against.
#[derive(Debug, Clone, PartialEq)]
pub struct CaBundle {
    /// The file, resolved against the config file's directory.
    pub file: PathBuf,
    /// The certificates (at least one, each usable as a trust anchor).
    pub certs: Vec<CertificateDer<'static>>,
}

/// The lowest TLS version accepted or used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl TlsVersion {
    /// The name written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "1.2",
            TlsVersion::Tls13 => "1.3",
        }
    }
}

/// Client-certificate authentication of an `https` virtual server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientAuth {
    /// No certificate is asked for.
    None,
    /// Asked for; a client may send none, one it sends must chain to the bundle.
    Optional(CaBundle),
    /// A valid certificate chaining to the bundle is required.
    Required(CaBundle),
}

/// TLS termination of an `https` virtual server.
#[derive(Debug, Clone, PartialEq)]
pub struct VsTls {
    /// Names of the [`Certificate`]s served (known, unique; at least one). The first is the
    /// default; every other one has at least one DNS name.
    pub certificates: Vec<String>,
    /// The lowest version accepted.
    pub min_version: TlsVersion,
    /// Resumption by tickets.
    pub session_tickets: bool,
    /// Sessions kept for resumption by id; 0 = no cache.
    pub session_cache: usize,
    /// Client certificates.
    pub client_auth: ClientAuth,
}

/// TLS to a server group's servers.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupTls {
    /// What servers' certificates must chain to.
    pub ca: CaBundle,
    /// The DNS name sent and verified; `None` = each server's IP address.
    pub server_name: Option<String>,
    /// The lowest version used.
    pub min_version: TlsVersion,
    /// The name of a [`Certificate`] presented to servers that ask for one.
    pub certificate: Option<String>,
}

/// Reads and checks one `[[certificate]]` (see the module doc).
pub(crate) fn certificate(
    s: &CertificateSection,
    origin: &Origin,
) -> Result<Certificate, ConfigError> {
    let name = s.name.get_ref().clone();
    let cert_file = resolve(s.cert_file.get_ref(), origin);
    let key_file = resolve(s.key_file.get_ref(), origin);
    let cert_err = |why: String| {
        file_error(
            &s.cert_file,
            &format!("the certificate file of certificate `{name}`"),
            &cert_file,
            &why,
            "give a PEM file with the certificate first, then its intermediate CA certificates",
            origin,
        )
    };
    let text = read_limited(&cert_file, MAX_PEM_FILE).map_err(&cert_err)?;
    let chain = certs_in(&text).map_err(&cert_err)?;
    let leaf = chain.first().ok_or_else(|| {
        cert_err("it holds no PEM certificate (no `-----BEGIN CERTIFICATE-----` block)".into())
    })?;
    let info = describe(leaf).map_err(&cert_err)?;

    let key_err = |why: String| {
        file_error(
            &s.key_file,
            &format!("the key file of certificate `{name}`"),
            &key_file,
            &why,
            "give the certificate's private key as unencrypted PEM (PKCS#8, SEC1 or PKCS#1)",
            origin,
        )
    };
    let text = read_limited(&key_file, MAX_PEM_FILE).map_err(&key_err)?;
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        return Err(key_err(
            "the key is encrypted; decrypt it first (`openssl pkey -in KEY -out PLAIN`)".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(|e| {
        key_err(match e {
            pem::Error::NoItemsFound => {
                "it holds no PEM private key (no `-----BEGIN … PRIVATE KEY-----` block)".into()
            }
            e => format!("it is not valid PEM: {e}"),
        })
    })?;
    let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key).map_err(|e| {
        key_err(format!(
            "the key is not one TLS can use ({e}): use RSA of 2048 bits or more, ECDSA P-256 or \
             P-384, or Ed25519"
        ))
    })?;
    match rustls::sign::CertifiedKey::new(chain.clone(), signing).keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(key_err(format!(
                "this key does not belong to the certificate in `{}` (their public keys \
                 differ); give the key the certificate was issued for",
                cert_file.display()
            )))
        }
        // The key type cannot tell its public key: nothing to compare, rustls will fail the
        // handshake if they differ. Every key type `any_supported_type` accepts can tell.
        Err(_) => {}
    }
    Ok(Certificate {
        name,
        cert_file,
        key_file,
        chain,
        key: PrivateKey(Arc::new(key)),
        info,
    })
}

/// Reads a CA bundle named by `key`; `what` says whose (for messages).
pub(crate) fn ca_bundle(
    key: &Spanned<PathBuf>,
    what: &str,
    origin: &Origin,
) -> Result<CaBundle, ConfigError> {
    let file = resolve(key.get_ref(), origin);
    let err = |why: String| {
        file_error(
            key,
            &format!("the CA file of {what}"),
            &file,
            &why,
            "give a PEM file of one or more CA certificates",
            origin,
        )
    };
    let text = read_limited(&file, MAX_PEM_FILE).map_err(&err)?;
    let certs = certs_in(&text).map_err(&err)?;
    if certs.is_empty() {
        return Err(err(
            "it holds no PEM certificate (no `-----BEGIN CERTIFICATE-----` block)".into(),
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    for (i, c) in certs.iter().enumerate() {
        roots.add(c.clone()).map_err(|e| {
            err(format!(
                "certificate {} of the file cannot be a trust anchor: {e}",
                i + 1
            ))
        })?;
    }
    Ok(CaBundle { file, certs })
}

/// Validates `[virtual_server.tls]` for virtual server `vs`; `known` are the certificates.
pub(crate) fn vs_tls(
    s: &Spanned<VsTlsSection>,
    vs: &str,
    known: &[Certificate],
    origin: &Origin,
) -> Result<VsTls, ConfigError> {
    let t = s.get_ref();
    let at = |span| origin.locate(Some(span));
    if t.certificates.get_ref().is_empty() {
        return Err(invalid(
            at(t.certificates.span()),
            format!(
                "virtual server `{vs}`: `certificates` is empty: name at least one \
                 [[certificate]] (the first is the default)"
            ),
        ));
    }
    let mut certificates: Vec<String> = Vec::new();
    for (i, n) in t.certificates.get_ref().iter().enumerate() {
        let c = find(n, known, origin)?;
        if certificates.contains(&c.name) {
            return Err(invalid(
                at(n.span()),
                format!(
                    "virtual server `{vs}`: certificate `{}` is listed twice: list it once",
                    c.name
                ),
            ));
        }
        if i > 0 && c.info.dns_names.is_empty() {
            return Err(invalid(
                at(n.span()),
                format!(
                    "virtual server `{vs}`: certificate `{}` ({}) has no DNS names in its \
                     subjectAltName, so no client can select it by SNI: list it first to make \
                     it the default, or remove it",
                    c.name,
                    c.cert_file.display()
                ),
            ));
        }
        certificates.push(c.name.clone());
    }
    let session_cache = match &t.session_cache {
        None => DEFAULT_SESSION_CACHE,
        Some(n) if *n.get_ref() <= 10_000_000 => *n.get_ref() as usize,
        Some(n) => {
            return Err(invalid(
                at(n.span()),
                format!(
                    "session_cache {} is out of range: use 0 (no cache) to 10000000 sessions",
                    n.get_ref()
                ),
            ))
        }
    };
    let whose = format!("virtual server `{vs}`");
    let client_auth = match t.client_auth.as_ref().map(|c| (c, c.get_ref().as_str())) {
        None | Some((_, "none")) => {
            if let Some(f) = &t.client_ca_file {
                return Err(invalid(
                    at(f.span()),
                    format!(
                        "virtual server `{vs}`: client_ca_file without client certificates: set \
                         client_auth = \"optional\" or \"required\", or remove client_ca_file"
                    ),
                ));
            }
            ClientAuth::None
        }
        Some((c, mode @ ("optional" | "required"))) => {
            let Some(f) = &t.client_ca_file else {
                return Err(invalid(
                    at(c.span()),
                    format!(
                        "virtual server `{vs}`: client_auth = \"{mode}\" needs client_ca_file, \
                         the CA certificates client certificates must chain to"
                    ),
                ));
            };
            let ca = ca_bundle(f, &whose, origin)?;
            if mode == "optional" {
                ClientAuth::Optional(ca)
            } else {
                ClientAuth::Required(ca)
            }
        }
        Some((c, other)) => {
            let all = ["none", "optional", "required"];
            let hint = did_you_mean(other, &all)
                .map(|s| format!(" — did you mean `{s}`?"))
                .unwrap_or_default();
            return Err(invalid(
                at(c.span()),
                format!(
                    "virtual server `{vs}`: unknown client_auth `{other}`: use \"none\", \
                     \"optional\" or \"required\"{hint}"
                ),
            ));
        }
    };
    Ok(VsTls {
        certificates,
        min_version: version(&t.min_version, origin)?,
        session_tickets: t.session_tickets.unwrap_or(true),
        session_cache,
        client_auth,
    })
}

/// Validates `[server_group.tls]` for group `group`; `known` are the certificates.
pub(crate) fn group_tls(
    s: &Spanned<GroupTlsSection>,
    group: &str,
    known: &[Certificate],
    origin: &Origin,
) -> Result<GroupTls, ConfigError> {
    let t = s.get_ref();
    let server_name = match &t.server_name {
        None => None,
        Some(n) => {
            let name = n.get_ref().trim_end_matches('.').to_ascii_lowercase();
            if rustls::pki_types::DnsName::try_from(name.as_str()).is_err()
                || name.parse::<IpAddr>().is_ok()
            {
                return Err(invalid(
                    origin.locate(Some(n.span())),
                    format!(
                        "group `{group}`: server_name `{}` is not a DNS name: write e.g. \
                         \"app.internal\", or remove it to verify each server's IP address",
                        n.get_ref()
                    ),
                ));
            }
            Some(name)
        }
    };
    let certificate = match &t.certificate {
        None => None,
        Some(n) => Some(find(n, known, origin)?.name.clone()),
    };
    Ok(GroupTls {
        ca: ca_bundle(&t.ca_file, &format!("group `{group}`"), origin)?,
        server_name,
        min_version: version(&t.min_version, origin)?,
        certificate,
    })
}

/// The certificate named `n`, with a did-you-mean.
fn find<'a>(
    n: &Spanned<String>,
    known: &'a [Certificate],
    origin: &Origin,
) -> Result<&'a Certificate, ConfigError> {
    let names: Vec<&str> = known.iter().map(|c| c.name.as_str()).collect();
    let name = crate::adc::reference(n, &names, "certificate", "[[certificate]]", origin)?;
    Ok(known
        .iter()
        .find(|c| c.name == name)
        .expect("reference found it"))
}

fn version(v: &Option<Spanned<String>>, origin: &Origin) -> Result<TlsVersion, ConfigError> {
    match v.as_ref().map(|v| (v, v.get_ref().trim())) {
        None | Some((_, "1.2")) => Ok(TlsVersion::Tls12),
        Some((_, "1.3")) => Ok(TlsVersion::Tls13),
        Some((v, other)) => {
            let old = matches!(
                other.to_ascii_lowercase().trim_start_matches("tls").trim(),
                "1.0" | "1.1" | "1" | "1.0.0"
            ) || other.to_ascii_lowercase().starts_with("ssl");
            Err(invalid(
                origin.locate(Some(v.span())),
                if old {
                    format!(
                        "min_version `{other}` is not offered: SSL and TLS before 1.2 are broken \
                         and never accepted; use \"1.2\" or \"1.3\""
                    )
                } else {
                    format!("unknown min_version `{other}`: use \"1.2\" or \"1.3\"")
                },
            ))
        }
    }
}

/// The certificates of a PEM text (other blocks, such as a key in the same file, are skipped).
fn certs_in(text: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("it is not valid PEM: {e}"))
}

/// The details of a DER certificate, or why it is not a certificate.
fn describe(der: &CertificateDer<'_>) -> Result<CertificateInfo, String> {
    let (rest, cert) = X509Certificate::from_der(der.as_ref())
        .map_err(|e| format!("the first certificate is not valid X.509: {e}"))?;
    if !rest.is_empty() {
        return Err("the first certificate has bytes after its end".into());
    }
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    let san = cert
        .subject_alternative_name()
        .map_err(|e| format!("its subjectAltName extension is malformed: {e}"))?;
    if let Some(san) = san {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => dns_names.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => ip_addresses.push(IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or([0; 4]))),
                    16 => {
                        ip_addresses.push(IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or([0; 16])))
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    let spki = cert.public_key();
    let alg = &spki.algorithm.algorithm;
    let key_type = if *alg == OID_PKCS1_RSAENCRYPTION {
        let bits = spki.parsed().map_or(0, |k| k.key_size());
        format!("RSA {bits}")
    } else if *alg == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        match curve {
            Some(c) if c == OID_EC_P256 => "ECDSA P-256".into(),
            Some(c) if c == OID_NIST_EC_P384 => "ECDSA P-384".into(),
            Some(c) => format!("ECDSA {c}"),
            None => "ECDSA".into(),
        }
    } else if *alg == OID_SIG_ED25519 {
        "Ed25519".into()
    } else {
        alg.to_id_string()
    };
    Ok(CertificateInfo {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        dns_names,
        ip_addresses,
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        serial: cert.raw_serial_as_string(),
        key_type,
    })
}

#[cfg(test)]
mod tests;
