//! TLS termination for `https` virtual servers, and TLS to servers.
//!
//! # What it owns
//!
//! - [`Keys`]: every `[[certificate]]` of a config generation as a rustls [`CertifiedKey`] —
//!   each private key parsed once per generation, never per connection;
//! - [`Terminator`]: one per `https` virtual server and generation. It holds the rustls
//!   [`ServerConfig`] (the SNI resolver [`Sni`], versions, suites, ALPN, resumption, the
//!   client-certificate verifier), built once; [`Terminator::serve`] runs one accepted
//!   connection: the handshake within the virtual server's `request_header_timeout`, in the
//!   connection's own task, then [`crate::http::serve_stream`] over the TLS stream (HTTP/2 when
//!   ALPN chose `h2`);
//! - [`Session`]: what outlives a reload, kept by virtual-server name: the rotating ticket keys,
//!   the server-side session cache and the handshake counters ([`TlsCounters`]). A reload swaps
//!   the listener's [`Terminator`] (new certificates for new connections) and keeps resumption
//!   working across it;
//! - [`Connector`] and [`ServerStream`]: TLS to a server group's servers, verified against the
//!   group's CA bundle and server name, with client-side session resumption across pooled
//!   connections.
//!
//! It does not validate configuration (`headway_config::tls` read and checked every file and
//! setting), speak HTTP (`crate::http`), or bind sockets (`crate::runtime`).
//!
//! # Crypto
//!
//! rustls with the aws-lc-rs provider, TLS 1.2 and 1.3 only, and only the provider's default
//! suites: TLS 1.3's AES-GCM and ChaCha20-Poly1305 suites, and for TLS 1.2 ECDHE with ECDSA or
//! RSA signatures and AES-GCM or ChaCha20-Poly1305 — no CBC, RC4, 3DES, static RSA key
//! exchange, or renegotiation (rustls implements none of them). Key exchange groups are the
//! provider's defaults (X25519, P-256, P-384). The client's suite preference is honoured.
//!
//! # Call order
//!
//! `crate::runtime` builds a generation: [`Keys::new`], then [`Terminator::new`] for each
//! `https` virtual server (with its [`Session`]) and [`Connector::new`] for each group with
//! TLS; any [`BuildError`] refuses the generation. Each accepted connection then calls
//! [`Terminator::serve`] on the listener's current terminator.
//!
//! Cancel safety: [`Terminator::serve`] and [`Connector::connect`] may be dropped at any await
//! point; the connection is then closed.

mod hold_io;

use std::collections::HashMap;
use std::io::{self, Read as _};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::client_socket::ClientSocket;
use bytes::BytesMut;
use headway_config::adc::{AdcConfig, ServerGroup, VirtualServer};
use headway_config::tls::{CaBundle, Certificate, ClientAuth, GroupTls, TlsVersion, VsTls};
pub(crate) use hold_io::HoldIo;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::server::{
    ClientHello, NoServerSessionStorage, ProducesTickets, ResolvesServerCert,
    ServerSessionMemoryCache, WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::http::Slot;
use crate::stats::{CertificateSnapshot, Counter, TlsSnapshot};

/// Why a generation's TLS configuration could not be built. The config validation checked
/// every input, so these mean a file changed between validation and start, or a bug.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A certificate's key was refused by the provider.
    #[error("certificate {name}: {source}")]
    Key {
        /// The certificate.
        name: String,
        /// The error.
        source: rustls::Error,
    },
    /// The TLS versions, a CA bundle or a client certificate were refused.
    #[error("{0}")]
    Config(rustls::Error),
    /// A client-certificate verifier could not be built.
    #[error("client certificate verifier: {0}")]
    Verifier(rustls::server::VerifierBuilderError),
    /// The ticket keys could not be made (the OS random source failed).
    #[error("session ticket keys: {0}")]
    Tickets(rustls::Error),
}

/// The crypto provider of the ADC: aws-lc-rs with its default (modern) suites and groups.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .clone()
}

fn versions(min: TlsVersion) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static BOTH: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS13, &rustls::version::TLS12];
    static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match min {
        TlsVersion::Tls12 => &BOTH,
        TlsVersion::Tls13 => &TLS13,
    }
}

fn roots(ca: &CaBundle) -> Result<RootCertStore, BuildError> {
    let mut r = RootCertStore::empty();
    for c in &ca.certs {
        r.add(c.clone()).map_err(BuildError::Config)?;
    }
    Ok(r)
}

/// The certificates of one generation, keys loaded.
#[derive(Debug, Default)]
pub struct Keys {
    by_name: HashMap<String, (Arc<CertifiedKey>, Arc<Certificate>)>,
}

impl Keys {
    /// Loads every certificate's key (once per generation).
    pub fn new(certificates: &[Certificate]) -> Result<Keys, BuildError> {
        let p = provider();
        let mut by_name = HashMap::with_capacity(certificates.len());
        for c in certificates {
            let key = p
                .key_provider
                .load_private_key(c.key.der().clone_key())
                .map_err(|source| BuildError::Key {
                    name: c.name.clone(),
                    source,
                })?;
            let ck = Arc::new(CertifiedKey::new(c.chain.clone(), key));
            by_name.insert(c.name.clone(), (ck, Arc::new(c.clone())));
        }
        Ok(Keys { by_name })
    }

    fn get(&self, name: &str) -> Option<&(Arc<CertifiedKey>, Arc<Certificate>)> {
        self.by_name.get(name)
    }
}

/// Chooses a virtual server's certificate from the client's SNI name.
///
/// Exact names first, then the `*.parent` wildcard of the name's parent (one label, RFC 6125
/// §6.4.3); among the certificates holding a name, the first (in the virtual server's list)
/// whose key can make a signature the client accepts. Without a name, or with one no
/// certificate holds, the same choice among all of them, the default first.
#[derive(Debug)]
pub struct Sni {
    exact: HashMap<String, Vec<Arc<CertifiedKey>>>,
    wildcard: HashMap<String, Vec<Arc<CertifiedKey>>>,
    all: Vec<Arc<CertifiedKey>>,
    counters: Arc<TlsCounters>,
}

impl Sni {
    /// The resolver over `names` (known in `keys`; the first is the default).
    fn new(names: &[String], keys: &Keys, counters: Arc<TlsCounters>) -> Sni {
        let mut s = Sni {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            all: Vec::new(),
            counters,
        };
        for n in names {
            let Some((ck, cert)) = keys.get(n) else {
                continue;
            };
            s.all.push(ck.clone());
            for d in &cert.info.dns_names {
                let (map, key) = match d.strip_prefix("*.") {
                    Some(parent) => (&mut s.wildcard, parent),
                    None => (&mut s.exact, d.as_str()),
                };
                let list = map.entry(key.to_string()).or_default();
                if !list.iter().any(|x| Arc::ptr_eq(x, ck)) {
                    list.push(ck.clone());
                }
            }
        }
        s
    }

    /// The certificate for `name` (lower case, as rustls hands it over) and a client that
    /// accepts `schemes`.
    fn choose(
        &self,
        name: Option<&str>,
        schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let found = name.and_then(|n| {
            self.exact.get(n).or_else(|| {
                n.split_once('.')
                    .and_then(|(_, parent)| self.wildcard.get(parent))
            })
        });
        let list = match found {
            Some(l) => l,
            None => {
                self.counters.sni_default.inc();
                &self.all
            }
        };
        if list.len() > 1 {
            if let Some(c) = list.iter().find(|c| c.key.choose_scheme(schemes).is_some()) {
                return Some(c.clone());
            }
        }
        list.first().cloned()
    }
}

impl ResolvesServerCert for Sni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(hello.server_name(), hello.signature_schemes())
    }
}

/// A virtual server's TLS state that survives reloads.
pub struct Session {
    /// Handshake counters.
    pub counters: Arc<TlsCounters>,
    ticketer: Arc<dyn ProducesTickets>,
    cache: Arc<ServerSessionMemoryCache>,
    cache_size: usize,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("cache_size", &self.cache_size)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The state for `tls`, taking over `old` (the same virtual server's, from the running
    /// generation): its counters and ticket keys always, its session cache while the size
    /// stays.
    pub fn carry(old: Option<&Arc<Session>>, tls: &VsTls) -> Result<Arc<Session>, BuildError> {
        if let Some(o) = old {
            if o.cache_size == tls.session_cache {
                return Ok(o.clone());
            }
        }
        let (counters, ticketer) = match old {
            Some(o) => (o.counters.clone(), o.ticketer.clone()),
            None => (
                Arc::default(),
                rustls::crypto::aws_lc_rs::Ticketer::new().map_err(BuildError::Tickets)?,
            ),
        };
        Ok(Arc::new(Session {
            counters,
            ticketer,
            cache: ServerSessionMemoryCache::new(tls.session_cache.max(1)),
            cache_size: tls.session_cache,
        }))
    }
}

/// TLS termination of one `https` virtual server in one generation.
#[derive(Debug)]
pub struct Terminator {
    config: Arc<ServerConfig>,
    counters: Arc<TlsCounters>,
    timeout: Duration,
}

impl Terminator {
    /// Builds the rustls configuration of `vs` (an `https` virtual server) once.
    pub fn new(
        vs: &VirtualServer,
        tls: &VsTls,
        keys: &Keys,
        session: &Session,
    ) -> Result<Terminator, BuildError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions(tls.min_version))
            .map_err(BuildError::Config)?;
        let builder = match &tls.client_auth {
            ClientAuth::Optional(ca) | ClientAuth::Required(ca) => {
                let v =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider());
                let v = if matches!(tls.client_auth, ClientAuth::Optional(_)) {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                builder.with_client_cert_verifier(v.build().map_err(BuildError::Verifier)?)
            }
            _ => builder.with_no_client_auth(),
        };
        let sni = Sni::new(&tls.certificates, keys, session.counters.clone());
        let mut config = builder.with_cert_resolver(Arc::new(sni));
        // RFC 7301: the server picks from the client's list; h2 first when allowed. A client
        // that offers only "http/1.0" (`curl --http1.0`) gets it, served as HTTP/1 — without
        // it in the list rustls refused the handshake (no_application_protocol).
        let mut alpn = Vec::with_capacity(3);
        if vs.http2 {
            alpn.push(b"h2".to_vec());
        }
        alpn.push(b"http/1.1".to_vec());
        alpn.push(b"http/1.0".to_vec());
        config.alpn_protocols = alpn;
        if tls.session_cache > 0 {
            config.session_storage = session.cache.clone();
        } else {
            config.session_storage = Arc::new(NoServerSessionStorage {});
        }
        if tls.session_tickets {
            config.ticketer = session.ticketer.clone();
            // One TLS 1.3 ticket per handshake, as OpenSSL issues on resumption: browsers keep
            // only the newest ticket per server, and each resumption brings a fresh one, so a
            // second ticket (rustls's default) is sealed and sent for nothing.
            config.send_tls13_tickets = 1;
        }
        Ok(Terminator {
            config: Arc::new(config),
            counters: session.counters.clone(),
            timeout: vs.request_header_timeout,
        })
    }

    /// The virtual server's handshake counters.
    pub fn counters(&self) -> &TlsCounters {
        &self.counters
    }

    /// Runs one accepted client connection: the TLS handshake (bounded by the virtual server's
    /// `request_header_timeout`), then HTTP over it until the connection ends or `drain` turns
    /// true. Failed handshakes are counted by reason.
    pub async fn serve(
        &self,
        slot: Arc<Slot>,
        stream: ClientSocket,
        peer: crate::client_socket::Peer,
        drain: watch::Receiver<bool>,
    ) {
        // TCP_NODELAY (or the virtual server's TCP profile) was set when it was accepted.
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.clone());
        let activity = Arc::new(crate::http::ConnActivity::default());
        let accept = acceptor
            .accept(HoldIo::new(stream, activity.clone()))
            .into_fallible();
        let mut tls = match tokio::time::timeout(self.timeout, accept).await {
            Ok(Ok(s)) => s,
            Ok(Err((e, mut io))) => {
                let why = Failure::of(&e);
                self.counters.failures[why as usize].inc();
                tracing::debug!(client = %peer.addr, reason = why.as_str(), error = %e, "TLS handshake failed");
                // The alert telling the client why, if it was held back.
                let _ = tokio::time::timeout(ALERT_TIMEOUT, io.drain()).await;
                return;
            }
            Err(_) => {
                self.counters.failures[Failure::Timeout as usize].inc();
                tracing::debug!(client = %peer.addr, "TLS handshake timed out");
                return;
            }
        };
        // Did the client's first request come with its Finished? Then the session ticket waits
        // for the answer (see `HoldIo`). An error here is the connection's and the first read
        // reports it.
        let (io, conn) = tls.get_mut();
        let answer_owed = conn
            .process_new_packets()
            .is_ok_and(|state| state.plaintext_bytes_to_read() > 0);
        io.release(answer_owed);
        let h2 = {
            let (_, conn) = tls.get_ref();
            self.counters.record(conn);
            conn.alpn_protocol() == Some(b"h2")
        };
        crate::http::serve_stream(slot, tls, peer, drain, h2, activity).await;
    }
}

/// How long a failed handshake's alert may take to leave.
const ALERT_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a handshake failed, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Not done within the timeout.
    Timeout,
    /// The client offers no version we accept (SSL 3, TLS 1.0, 1.1, or 1.2 on a 1.3-only
    /// virtual server).
    Version,
    /// No cipher suite, key-exchange group or signature scheme in common.
    Cipher,
    /// The client offers no protocol we speak by ALPN.
    Alpn,
    /// Client certificate missing or refused.
    ClientCertificate,
    /// The client sent an alert (for instance, it does not trust our certificate).
    Alert,
    /// Malformed or unexpected messages.
    Protocol,
    /// The client closed or reset the connection during the handshake.
    Closed,
    /// Anything else.
    Other,
}

impl Failure {
    const ALL: [Failure; 9] = [
        Failure::Timeout,
        Failure::Version,
        Failure::Cipher,
        Failure::Alpn,
        Failure::ClientCertificate,
        Failure::Alert,
        Failure::Protocol,
        Failure::Closed,
        Failure::Other,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Version => "version",
            Failure::Cipher => "cipher",
            Failure::Alpn => "alpn",
            Failure::ClientCertificate => "client_certificate",
            Failure::Alert => "alert",
            Failure::Protocol => "protocol",
            Failure::Closed => "closed",
            Failure::Other => "other",
        }
    }

    fn of(e: &io::Error) -> Failure {
        use rustls::{Error as E, PeerIncompatible as P};
        let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) else {
            return Failure::Closed;
        };
        match tls {
            // A TLS 1.0 or 1.1 hello lacks signature_algorithms (RFC 5246 §7.4.1.4.1), which
            // rustls checks before the version: every TLS 1.2 client sends it.
            E::PeerIncompatible(
                P::Tls12NotOffered
                | P::SignatureAlgorithmsExtensionRequired
                | P::Tls12NotOfferedOrEnabled
                | P::SupportedVersionsExtensionRequired
                | P::ServerTlsVersionIsDisabledByOurConfig
                | P::ServerDoesNotSupportTls12Or13,
            ) => Failure::Version,
            E::PeerIncompatible(
                P::NoCipherSuitesInCommon
                | P::NoKxGroupsInCommon
                | P::NoSignatureSchemesInCommon
                | P::NoEcPointFormatsInCommon,
            ) => Failure::Cipher,
            E::NoApplicationProtocol => Failure::Alpn,
            E::NoCertificatesPresented | E::InvalidCertificate(_) => Failure::ClientCertificate,
            E::AlertReceived(_) => Failure::Alert,
            E::InvalidMessage(_)
            | E::InappropriateMessage { .. }
            | E::InappropriateHandshakeMessage { .. }
            | E::PeerMisbehaved(_)
            | E::PeerIncompatible(_)
            | E::DecryptError => Failure::Protocol,
            _ => Failure::Other,
        }
    }
}

/// A virtual server's handshake counters (kept across reloads by name).
#[derive(Debug, Default)]
pub struct TlsCounters {
    full: Counter,
    resumed: Counter,
    tls12: Counter,
    tls13: Counter,
    alpn_h2: Counter,
    alpn_http11: Counter,
    alpn_none: Counter,
    client_certificates: Counter,
    sni_default: Counter,
    failures: [Counter; Failure::ALL.len()],
}

impl TlsCounters {
    /// Counts a completed handshake.
    fn record(&self, c: &rustls::ServerConnection) {
        match c.handshake_kind() {
            Some(HandshakeKind::Resumed) => self.resumed.inc(),
            _ => self.full.inc(),
        }
        match c.protocol_version() {
            Some(ProtocolVersion::TLSv1_3) => self.tls13.inc(),
            _ => self.tls12.inc(),
        }
        match c.alpn_protocol() {
            Some(b"h2") => self.alpn_h2.inc(),
            Some(_) => self.alpn_http11.inc(),
            None => self.alpn_none.inc(),
        }
        if c.peer_certificates().is_some_and(|c| !c.is_empty()) {
            self.client_certificates.inc();
        }
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> TlsSnapshot {
        TlsSnapshot {
            handshakes_full: self.full.get(),
            handshakes_resumed: self.resumed.get(),
            tls12: self.tls12.get(),
            tls13: self.tls13.get(),
            alpn_h2: self.alpn_h2.get(),
            alpn_http11: self.alpn_http11.get(),
            alpn_none: self.alpn_none.get(),
            client_certificates: self.client_certificates.get(),
            sni_default: self.sni_default.get(),
            failures: Failure::ALL
                .iter()
                .map(|f| (f.as_str().to_string(), self.failures[*f as usize].get()))
                .collect(),
        }
    }
}

/// The certificates of `config` with what the admin API shows about them.
pub fn certificates(config: &AdcConfig) -> Vec<CertificateSnapshot> {
    let time = |t: i64| {
        time::OffsetDateTime::from_unix_timestamp(t)
            .ok()
            .and_then(|d| {
                d.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| t.to_string())
    };
    config
        .certificates
        .iter()
        .map(|c| CertificateSnapshot {
            name: c.name.clone(),
            cert_file: c.cert_file.display().to_string(),
            key_file: c.key_file.display().to_string(),
            subject: c.info.subject.clone(),
            issuer: c.info.issuer.clone(),
            dns_names: c.info.dns_names.clone(),
            ip_addresses: c.info.ip_addresses.iter().map(|a| a.to_string()).collect(),
            not_before: time(c.info.not_before),
            not_after: time(c.info.not_after),
            not_after_unix: c.info.not_after,
            serial: c.info.serial.clone(),
            key_type: c.info.key_type.clone(),
            chain_length: c.chain.len(),
            virtual_servers: config
                .virtual_servers
                .iter()
                .filter(|v| {
                    v.tls
                        .as_ref()
                        .is_some_and(|t| t.certificates.contains(&c.name))
                })
                .map(|v| v.name.clone())
                .collect(),
            groups: config
                .groups
                .iter()
                .filter(|g| {
                    g.tls
                        .as_ref()
                        .is_some_and(|t| t.certificate.as_deref() == Some(c.name.as_str()))
                })
                .map(|g| g.name.clone())
                .collect(),
        })
        .collect()
}

/// TLS to one server group's servers in one generation.
#[derive(Debug)]
pub struct Connector {
    config: Arc<ClientConfig>,
    /// The name sent and verified; `None` = each server's DNS name in the config, or its IP
    /// address.
    server_name: Option<ServerName<'static>>,
}

impl Connector {
    /// Builds the rustls client configuration of `group` (which has TLS) once.
    pub fn new(group: &ServerGroup, tls: &GroupTls, keys: &Keys) -> Result<Connector, BuildError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions(tls.min_version))
            .map_err(BuildError::Config)?
            .with_root_certificates(roots(&tls.ca)?);
        let mut config = match tls.certificate.as_deref().and_then(|n| keys.get(n)) {
            Some((_, cert)) => builder
                .with_client_auth_cert(cert.chain.clone(), cert.key.der().clone_key())
                .map_err(BuildError::Config)?,
            None => builder.with_no_client_auth(),
        };
        // The requests to servers are in the group's protocol: HTTP/2 only where it says so
        // (a server that does not take it fails the handshake rather than getting HTTP/2
        // frames it cannot read).
        config.alpn_protocols = match group.protocol {
            headway_config::adc::UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
            headway_config::adc::UpstreamProtocol::Http2 => vec![b"h2".to_vec()],
        };
        let server_name = match &tls.server_name {
            None => None,
            Some(n) => Some(ServerName::try_from(n.clone()).map_err(|_| {
                BuildError::Config(rustls::Error::General(format!(
                    "group {}: server name {n} is not a DNS name",
                    group.name
                )))
            })?),
        };
        Ok(Connector {
            config: Arc::new(config),
            server_name,
        })
    }

    /// The TLS handshake with the server at `addr` over `tcp`, which the config names `host`
    /// (a DNS name) or not. The name sent and verified is the group's `server_name`, else
    /// `host`, else the IP address. Not bounded in time here: the caller bounds connect and
    /// handshake together.
    pub async fn connect(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
        host: Option<&str>,
    ) -> io::Result<ServerStream> {
        let name = self
            .server_name
            .clone()
            .or_else(|| host.and_then(|h| ServerName::try_from(h.to_string()).ok()))
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
        let s = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await?;
        Ok(ServerStream::Tls(Box::new(s)))
    }
}

/// A connection to a server: plain TCP, or TLS over it. Besides `AsyncRead` and `AsyncWrite`
/// it has the readiness-driven reads the L7 path uses on server connections
/// ([`ServerStream::try_read_buf`], [`ServerStream::poll_read_ready`]) and the idle check of
/// the pool ([`ServerStream::alive`]).
///
/// Writes to a TLS stream may stay buffered in the TLS layer when the socket is full: call
/// `flush` after the last write of a request (a no-op for plain TCP).
#[derive(Debug)]
pub enum ServerStream {
    /// Cleartext.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl From<TcpStream> for ServerStream {
    fn from(s: TcpStream) -> Self {
        ServerStream::Plain(s)
    }
}

impl ServerStream {
    /// The socket.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            ServerStream::Plain(s) => s,
            ServerStream::Tls(s) => s.get_ref().0,
        }
    }

    /// Reads what is available now into `buf`'s spare capacity (at least 4 KiB is made
    /// available), without waiting: `Ok(0)` at the end of the stream, `WouldBlock` when nothing
    /// is there yet (then [`ServerStream::poll_read_ready`] waits for more).
    pub fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let s = match self {
            ServerStream::Plain(s) => return s.try_read_buf(buf),
            ServerStream::Tls(s) => s,
        };
        // Plaintext is copied out of the TLS layer into initialised memory: at most 32 KiB is
        // zeroed per read (a record is 16 KiB).
        let start = buf.len();
        let room = (buf.capacity() - start).clamp(4096, 32 * 1024);
        buf.resize(start + room, 0);
        let got = try_read_tls(s, &mut buf[start..]);
        buf.truncate(start + *got.as_ref().unwrap_or(&0));
        got
    }

    /// Waits until the socket is readable.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp().poll_read_ready(cx)
    }

    /// Whether an idle connection is still open and quiet: nothing to read, no close. TLS
    /// records that carry no data (session tickets) do not count.
    pub fn alive(&mut self) -> bool {
        let mut b = [0u8; 1];
        let r = match self {
            ServerStream::Plain(s) => s.try_read(&mut b),
            ServerStream::Tls(s) => try_read_tls(s, &mut b),
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Reads the plaintext available now into `dst`, feeding the TLS layer from the socket without
/// waiting: `Ok(0)` at the end, `WouldBlock` when nothing is there yet.
fn try_read_tls(
    s: &mut tokio_rustls::client::TlsStream<TcpStream>,
    dst: &mut [u8],
) -> io::Result<usize> {
    let (tcp, conn) = s.get_mut();
    loop {
        match conn.reader().read(dst) {
            Ok(n) => return Ok(n),
            // The server closed without close_notify: an end like any other, as the HTTP
            // framing tells whether the response was complete.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            Err(_) => {}
        }
        // No plaintext buffered: feed what the socket has (`WouldBlock` returns from here).
        conn.read_tls(&mut TryIo(tcp))?;
        conn.process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        // Answers the TLS layer owes (a key update): written if the socket takes them.
        while conn.wants_write() {
            match conn.write_tls(&mut TryIo(tcp)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Non-blocking `Read`/`Write` over a tokio socket (`WouldBlock` when it has nothing).
struct TryIo<'a>(&'a TcpStream);

impl io::Read for TryIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl io::Write for TryIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ServerStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ServerStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ServerStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerStream::Plain(s) => s.is_write_vectored(),
            ServerStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ServerStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ServerStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(names: &[&str], ecdsa: bool) -> (Arc<CertifiedKey>, Certificate) {
        let alg = if ecdsa {
            &rcgen::PKCS_ECDSA_P256_SHA256
        } else {
            &rcgen::PKCS_ED25519
        };
        let kp = rcgen::KeyPair::generate_for(alg).unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.self_signed(&kp).unwrap();
        let der = rustls::pki_types::PrivateKeyDer::try_from(kp.serialize_der()).unwrap();
        let signing = provider().key_provider.load_private_key(der).unwrap();
        let ck = Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("k.pem"), kp.serialize_pem()).unwrap();
        let toml = format!(
            "[[certificate]]\nname = \"c\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            dir.path().join("c.pem").display(),
            dir.path().join("k.pem").display()
        );
        let cfg = headway_config::Config::parse(&toml, "test.toml").unwrap();
        (ck, cfg.adc.certificates[0].clone())
    }

    fn sni(certs: Vec<(Arc<CertifiedKey>, Certificate)>) -> Sni {
        let mut keys = Keys::default();
        let mut names = Vec::new();
        for (i, (ck, mut c)) in certs.into_iter().enumerate() {
            c.name = format!("c{i}");
            names.push(c.name.clone());
            keys.by_name.insert(c.name.clone(), (ck, Arc::new(c)));
        }
        Sni::new(&names, &keys, Arc::default())
    }

    #[test]
    fn exact_names_then_wildcards_then_the_default() {
        let a = key(&["a.example"], true);
        let w = key(&["*.b.example", "b.example"], true);
        let (ka, kw) = (a.0.clone(), w.0.clone());
        let s = sni(vec![a, w]);
        let ecdsa = [rustls::SignatureScheme::ECDSA_NISTP256_SHA256];
        let pick = |n: Option<&str>| s.choose(n, &ecdsa).unwrap();
        assert!(Arc::ptr_eq(&pick(Some("a.example")), &ka));
        assert!(Arc::ptr_eq(&pick(Some("x.b.example")), &kw));
        assert!(Arc::ptr_eq(&pick(Some("b.example")), &kw));
        // A wildcard covers one label only.
        assert!(Arc::ptr_eq(&pick(Some("y.x.b.example")), &ka));
        assert!(Arc::ptr_eq(&pick(None), &ka));
        assert!(Arc::ptr_eq(&pick(Some("unknown.example")), &ka));
        assert_eq!(s.counters.sni_default.get(), 3);
    }

    #[test]
    fn the_first_key_the_client_can_verify_wins() {
        let ed = key(&["a.example"], false);
        let ec = key(&["a.example"], true);
        let (ked, kec) = (ed.0.clone(), ec.0.clone());
        let s = sni(vec![ed, ec]);
        let only_ecdsa = [rustls::SignatureScheme::ECDSA_NISTP256_SHA256];
        let both = [
            rustls::SignatureScheme::ED25519,
            rustls::SignatureScheme::ECDSA_NISTP256_SHA256,
        ];
        assert!(Arc::ptr_eq(
            &s.choose(Some("a.example"), &only_ecdsa).unwrap(),
            &kec
        ));
        assert!(Arc::ptr_eq(
            &s.choose(Some("a.example"), &both).unwrap(),
            &ked
        ));
        assert!(Arc::ptr_eq(&s.choose(None, &only_ecdsa).unwrap(), &kec));
    }
}
