//! The WAN-optimizer role: `[wanopt]` of `headway run`, and the `headway wanopt …` helpers that
//! make the files that section names.
//!
//! Owns the conversion of the validated [`WanoptConfig`] (plain types from `headway-config`)
//! into a [`headway_wanopt::ApplianceConfig`], starting the appliance, and the admin API's view
//! of it ([`ApplianceView`], a [`WanoptControl`]). It does not own the appliance (see
//! `headway-wanopt`) nor the validation (see `headway_config::wanopt`).
//!
//! Call order in `headway run`: [`appliance_config`] before the runtime starts (a bad
//! certificate or key is a usage error), then [`start`] inside the runtime before `ready` is
//! printed, then [`ApplianceView::stop`] after the shutdown signal: dropping the appliance
//! closes the tunnel and removes its interception rules.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use headway_admin::{WanoptControl, WanoptFlow, WanoptPath, WanoptStats, WanoptTunnel};
use headway_config::wanopt::ServiceClass as ConfigClass;
use headway_config::WanoptConfig;
use headway_dedup::DedupKey;
use headway_tunnel::{Fingerprint, Identity, Options, PeerConfig, ServiceClass, ServiceId};
use headway_wanopt::{
    Appliance, ApplianceConfig, InterceptConfig, InterceptRule, ServiceConfig, StartError,
};
use parking_lot::Mutex;

use crate::exit::Failure;

/// `headway wanopt …`: make the files a `[wanopt]` section names.
#[derive(Debug, clap::Subcommand)]
pub enum WanoptCommand {
    /// Generate this appliance's certificate and key (PEM) and print the certificate's
    /// fingerprint, for the peers' `[[wanopt.peer]] fingerprint`.
    Identity {
        /// Where to write the certificate (`cert_file`).
        #[arg(long, value_name = "FILE")]
        cert: PathBuf,
        /// Where to write the private key (`key_file`; created readable by its owner only).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Replace existing files (peers that pinned the old fingerprint must be updated).
        #[arg(long)]
        force: bool,
    },
    /// Print the fingerprint of a certificate (PEM), for a peer's `fingerprint`.
    Fingerprint {
        /// The certificate file.
        #[arg(long, value_name = "FILE")]
        cert: PathBuf,
    },
    /// Write a new deployment dedup key (32 random bytes as hex, mode 0600) for
    /// `dedup_key_file`; copy the same file to every appliance of the deployment.
    DedupKey {
        /// Where to write the key.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Replace an existing file (every appliance then needs the new key).
        #[arg(long)]
        force: bool,
    },
}

/// Runs `headway wanopt …`.
pub fn command(cmd: WanoptCommand) -> Result<(), Failure> {
    match cmd {
        WanoptCommand::Identity { cert, key, force } => {
            if !force {
                refuse_existing(&cert)?;
                refuse_existing(&key)?;
            }
            let id = Identity::generate()
                .context("cannot generate a certificate")
                .map_err(Failure::Runtime)?;
            id.save(&cert, &key)
                .context("cannot write the identity")
                .map_err(Failure::Usage)?;
            println!("{}", id.fingerprint());
            eprintln!(
                "wrote {} and {}; the line above is this appliance's fingerprint: put it in the \
                 peers' [[wanopt.peer]] `fingerprint`",
                cert.display(),
                key.display()
            );
            Ok(())
        }
        WanoptCommand::Fingerprint { cert } => {
            println!("{}", fingerprint_of(&cert).map_err(Failure::Usage)?);
            Ok(())
        }
        WanoptCommand::DedupKey { out, force } => {
            let key = random_key()
                .context("cannot read random bytes from /dev/urandom")
                .map_err(Failure::Runtime)?;
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).mode(0o600);
            if force {
                opts.create(true).truncate(true);
            } else {
                opts.create_new(true);
            }
            let mut f = opts.open(&out).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    exists(&out)
                } else {
                    Failure::Usage(
                        anyhow::Error::new(e).context(format!("cannot create {}", out.display())),
                    )
                }
            })?;
            f.write_all(format!("{hex}\n").as_bytes())
                .with_context(|| format!("cannot write {}", out.display()))
                .map_err(Failure::Usage)?;
            eprintln!(
                "wrote {}: use it as `dedup_key_file` on every appliance of the deployment",
                out.display()
            );
            Ok(())
        }
    }
}

fn refuse_existing(path: &Path) -> Result<(), Failure> {
    if path.exists() {
        return Err(exists(path));
    }
    Ok(())
}

fn exists(path: &Path) -> Failure {
    Failure::Usage(anyhow::anyhow!(
        "{} already exists: keep it, choose another path, or pass --force to replace it",
        path.display()
    ))
}

/// The SHA-256 fingerprint of the first certificate in a PEM file.
fn fingerprint_of(path: &Path) -> anyhow::Result<Fingerprint> {
    use rustls::pki_types::pem::PemObject as _;
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(&pem)
        .map_err(|e| anyhow::anyhow!("{}: no PEM certificate in it: {e}", path.display()))?;
    Ok(Fingerprint::of(&der))
}

/// 32 bytes from the OS's random source: a secret key must not come from a seeded generator.
fn random_key() -> std::io::Result<[u8; 32]> {
    use std::io::Read as _;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}

/// The appliance configuration for a validated `[wanopt]`. Fails (a usage error) if the
/// certificate or key does not load.
pub fn appliance_config(w: &WanoptConfig) -> Result<ApplianceConfig, Failure> {
    let identity = Identity::from_pem(&w.cert_pem, &w.key_pem)
        .with_context(|| {
            format!(
                "[wanopt] {}: the certificate or key is not usable (regenerate both with \
                 `headway wanopt identity`)",
                identity_files(w)
            )
        })
        .map_err(Failure::Usage)?;
    let peers = w
        .peers
        .iter()
        .map(|p| {
            let mut peer = PeerConfig::new(
                p.name.clone(),
                p.address,
                Fingerprint(p.fingerprint),
                p.link_rate,
            );
            peer.rtt_estimate = p.rtt;
            peer.mtu = p.mtu;
            peer
        })
        .collect();
    let services = w
        .services
        .iter()
        .map(|s| ServiceConfig {
            id: ServiceId(s.id),
            listen: s.listen,
            peer: s.peer.clone(),
            target: s.target,
            class: class(s.class),
        })
        .collect();
    let intercept = w.intercept.as_ref().map(|i| InterceptConfig {
        listen: i.listen,
        interfaces: i.interfaces.clone(),
        rules: i
            .rules
            .iter()
            .map(|r| InterceptRule {
                destinations: r.destinations.iter().map(|c| (c.addr, c.prefix)).collect(),
                ports: r.ports.iter().map(|p| (p.first, p.last)).collect(),
                peer: r.peer.clone(),
                class: class(r.class),
            })
            .collect(),
    });
    Ok(ApplianceConfig {
        identity,
        tunnel_listen: w.tunnel_listen,
        peers,
        tunnel_options: Options {
            fec: w.fec,
            ..Options::default()
        },
        dedup_key: DedupKey::new(w.dedup_key.0),
        memory_store_bytes: w.memory_store.bytes(),
        retry_after: w.retry_after,
        services,
        disk_store: w.disk_store.as_ref().map(|d| headway_store::StoreConfig {
            // The appliance syncs the store every second off the async workers; a
            // size-based sync would run inside a flow's `record`, on a worker, and hold
            // every other flow's for as long as the disk takes.
            sync_bytes: None,
            // Evicted segments are deleted by the same flush, for the same reason: unlinking a
            // 64 MiB segment took ~30 ms on a VM's disk, inside a flow's `record`.
            deferred_removal: true,
            ..headway_store::StoreConfig::disk(d.dir.clone(), d.size.bytes())
        }),
        intercept,
    })
}

fn class(c: ConfigClass) -> ServiceClass {
    match c {
        ConfigClass::PassThrough => ServiceClass::PassThrough,
        ConfigClass::Compress => ServiceClass::Compress,
        ConfigClass::DedupMemory => ServiceClass::DedupMemory,
        ConfigClass::DedupDisk => ServiceClass::DedupDisk,
    }
}

/// Starts the appliance (inside the runtime). Every failure here — a port in use, a store
/// directory that cannot be opened, interception without root, a certificate rustls refuses —
/// is a usage error; `files` names the identity files for the last case.
pub async fn start(cfg: ApplianceConfig, files: &str) -> Result<Arc<ApplianceView>, Failure> {
    let tunnel = cfg.tunnel_listen;
    let appliance = Appliance::start(cfg).await.map_err(|e| {
        let tls = matches!(e, StartError::Tunnel(headway_tunnel::BindError::Tls(_)));
        let e = anyhow::Error::new(e).context("cannot start the WAN optimizer");
        Failure::Usage(if tls {
            e.context(format!(
                "[wanopt] {files}: the certificate or key is not usable (regenerate both with \
                 `headway wanopt identity`)"
            ))
        } else {
            e
        })
    })?;
    tracing::info!(
        tunnel = %appliance.tunnel_addr().map_or(tunnel, |a| a),
        intercept = ?appliance.intercept_addr(),
        "WAN optimizer running"
    );
    Ok(Arc::new(ApplianceView(Mutex::new(Some(appliance)))))
}

/// `cert_file … / key_file …`, for messages about the identity.
pub fn identity_files(w: &WanoptConfig) -> String {
    format!(
        "cert_file {} / key_file {}",
        w.cert_file.display(),
        w.key_file.display()
    )
}

/// The running appliance as the admin API sees it; empty after [`ApplianceView::stop`].
pub struct ApplianceView(Mutex<Option<Appliance>>);

impl ApplianceView {
    /// Stops the appliance: closes the tunnel and its listeners, flushes its disk store and
    /// removes its interception rules (the appliance's drop does all of it). Call inside the
    /// runtime.
    pub fn stop(&self) {
        if let Some(a) = self.0.lock().take() {
            let stats = a.stats();
            tracing::info!(groups = stats.groups.len(), "WAN optimizer stopping");
            drop(a);
        }
    }
}

impl WanoptControl for ApplianceView {
    fn flows(&self) -> Vec<WanoptFlow> {
        let guard = self.0.lock();
        let Some(a) = guard.as_ref() else {
            return Vec::new();
        };
        // Through serde, as the stats below: the admin API's shape is the appliance's own.
        serde_json::to_value(a.flows())
            .and_then(serde_json::from_value)
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot convert the appliance's flows");
                Vec::new()
            })
    }

    fn stats(&self) -> WanoptStats {
        let guard = self.0.lock();
        let Some(a) = guard.as_ref() else {
            return WanoptStats::default();
        };
        // Through serde, so the admin API's shape stays the appliance's own serialization
        // (the same field names) without this crate tracking every counter it adds.
        let mut stats: WanoptStats = serde_json::to_value(a.stats())
            .and_then(serde_json::from_value)
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot convert the appliance's stats");
                WanoptStats::default()
            });
        let t = a.tunnel_stats();
        stats.tunnel = WanoptTunnel {
            connections: t.connections,
            peers_ready: t.peers_ready,
            refused: t.refused,
            flows_accepted: t.flows_accepted,
            bad_headers: t.bad_headers,
            packets_sent: t.packets_sent,
            packets_lost: t.packets_lost,
            fec_windows: t.fec.windows,
            fec_skipped: t.fec.skipped,
            fec_repair_sent: t.fec.repair_sent,
            fec_repair_received: t.fec.repair_received,
            fec_recovered: t.fec.recovered,
            fec_unrecoverable: t.fec.unrecoverable,
            fec_held: t.fec.held,
            fec_holes_given_up: t.fec.holes_given_up,
            fec_probes_sent: t.fec.probes_sent,
            fec_probes_received: t.fec.probes_received,
            cc_delay_decreases: t.congestion.delay_decreases,
            cc_loss_decreases: t.congestion.loss_decreases,
            cc_persistent_congestion: t.congestion.persistent_congestion,
            cc_recoveries: t.congestion.recoveries,
        };
        stats.paths = a
            .tunnel_paths()
            .into_iter()
            .map(|p| WanoptPath {
                peer: p.peer,
                loss_out: p.to,
                loss_in: p.from,
            })
            .collect();
        stats
    }
}
