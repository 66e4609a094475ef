//! Wiring of the roles a running instance plays: emulated WAN links, the WAN-optimizer
//! appliance ([`crate::wanopt`]) and the admin API.
//!
//! `headway emulate` is the one-link shortcut of `headway run`: both build the same
//! [`headway_config::Config`] parts and hand them to [`serve`], which starts one
//! [`headway_emulator::Bridge`] per link, the appliance when `[wanopt]` is present, the admin
//! API, and waits for SIGINT/SIGTERM. Everything that can be wrong with the config or the
//! machine (bad spec, unknown interface, not root, a port in use, a certificate that does not
//! load) is detected before `ready` is printed and exits 64.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use std::path::PathBuf;

use headway_admin::{AdcControl, AdminState, LinkControl, LinkView, WanoptControl};
use headway_config::{AdminConfig, Config, LinkConfig, LinkSpec, RuntimeConfig, WanoptConfig};
use headway_emulator::{Bridge, BridgeConfig, BridgeHandle, Direction, Tuning};
use headway_link::Params;

use crate::exit::Failure;

/// Arguments of `headway emulate`.
#[derive(Debug, clap::Args)]
pub struct EmulateArgs {
    /// First interface (frames read here go out on --b through the a_to_b link).
    #[arg(long, value_name = "IFACE")]
    a: String,
    /// Second interface.
    #[arg(long, value_name = "IFACE")]
    b: String,
    /// Name of the link in the admin API and metrics.
    #[arg(long, default_value = "wan")]
    name: String,
    /// Link spec for both directions, e.g. "rate=1.5mbit delay=150ms loss=1%".
    #[arg(long, value_name = "SPEC", default_value = "")]
    both: String,
    /// Link spec for the a→b direction only (applied over --both).
    #[arg(long, value_name = "SPEC")]
    a_to_b: Option<String>,
    /// Link spec for the b→a direction only (applied over --both).
    #[arg(long, value_name = "SPEC")]
    b_to_a: Option<String>,
    /// Seed of the loss/jitter random sequence (default: drawn and logged).
    #[arg(long)]
    seed: Option<u64>,
    /// Admin API listen address.
    #[arg(long, default_value = "127.0.0.1:9090")]
    admin: SocketAddr,
    /// Admin API bearer token (required when --admin is not loopback).
    #[arg(long, env = "HEADWAY_TOKEN")]
    token: Option<String>,
    /// Run the frame-release threads at this real-time (SCHED_FIFO) priority, 1–99, so frames
    /// leave on time even on a busy machine (as an in-kernel emulator would).
    #[arg(long, value_name = "PRIORITY", value_parser = clap::value_parser!(u8).range(1..=99))]
    realtime: Option<u8>,
}

/// `headway emulate`.
pub fn emulate(args: EmulateArgs) -> Result<(), Failure> {
    let usage = |e: anyhow::Error| Failure::Usage(e);
    let both: LinkSpec = args
        .both
        .parse()
        .map_err(|e| usage(anyhow::Error::new(e).context("--both")))?;
    let base =
        Params::try_from(&both).map_err(|e| usage(anyhow::Error::new(e).context("--both")))?;
    let dir = |flag: &str, spec: &Option<String>| -> Result<Params, Failure> {
        match spec {
            None => Ok(base.clone()),
            Some(text) => {
                let s: LinkSpec = text
                    .parse()
                    .map_err(|e| usage(anyhow::Error::new(e).context(flag.to_string())))?;
                s.apply(&base)
                    .map_err(|e| usage(anyhow::Error::new(e).context(flag.to_string())))
            }
        }
    };
    let link = LinkConfig {
        name: args.name,
        a: args.a,
        b: args.b,
        seed: args.seed,
        a_to_b: dir("--a-to-b", &args.a_to_b)?,
        b_to_a: dir("--b-to-a", &args.b_to_a)?,
        realtime: args.realtime,
    };
    let admin = AdminConfig::new(args.admin, args.token).map_err(|e| usage(e.into()))?;
    serve(Roles {
        admin,
        links: vec![link],
        wanopt: None,
        runtime: RuntimeConfig::default(),
        adc: None,
    })
}

/// `headway check -c FILE`.
pub fn check(path: &Path) -> Result<(), Failure> {
    let cfg = Config::from_file(path).map_err(|e| Failure::Usage(e.into()))?;
    println!(
        "{}: ok — admin API on {}, {} emulated link(s){}",
        path.display(),
        cfg.admin.listen,
        cfg.links.len(),
        cfg.links
            .iter()
            .map(|l| format!(
                "\n  link {} ({} ↔ {}): a_to_b {}; b_to_a {}",
                l.name,
                l.a,
                l.b,
                LinkSpec::from(&l.a_to_b),
                LinkSpec::from(&l.b_to_a)
            ))
            .collect::<String>()
    );
    if let Some(w) = &cfg.wanopt {
        println!("{}", wanopt_summary(w));
    }
    if !cfg.adc.is_empty() {
        println!("{}", adc_summary(&cfg.adc));
    }
    Ok(())
}

/// What `check` says about valid ADC sections.
fn adc_summary(a: &headway_config::AdcConfig) -> String {
    let mut s = format!(
        "  adc: {} virtual server(s), {} server group(s), {} monitor(s)",
        a.virtual_servers.len(),
        a.groups.len(),
        a.monitors.len()
    );
    for v in &a.virtual_servers {
        s.push_str(&format!(
            "\n    virtual server {} ({}) on {} -> {}{}{}",
            v.name,
            v.kind.as_str(),
            v.listen,
            action(&v.action),
            v.rules
                .iter()
                .map(|r| format!(", rule {} -> {}", r.name, action(&r.action)))
                .collect::<String>(),
            v.tls
                .as_ref()
                .map(|t| format!(", certificates {}", t.certificates.join(", ")))
                .unwrap_or_default()
        ));
    }
    for c in &a.certificates {
        s.push_str(&format!(
            "\n    certificate {}: {} ({}, issued by {})",
            c.name,
            if c.info.dns_names.is_empty() {
                c.info.subject.clone()
            } else {
                c.info.dns_names.join(", ")
            },
            c.info.key_type,
            c.info.issuer
        ));
    }
    for g in &a.groups {
        s.push_str(&format!(
            "\n    group {} ({}{}): {}",
            g.name,
            g.method,
            g.monitor
                .as_ref()
                .map(|m| format!(", monitor {m}"))
                .unwrap_or_default(),
            g.servers
                .iter()
                .map(|v| {
                    // A server's name defaults to its address: said once then.
                    let address = v.address.to_string();
                    let named = if v.name == address {
                        address
                    } else {
                        format!("{} {address}", v.name)
                    };
                    format!("{named}{}", if v.backup { " (backup)" } else { "" })
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    s
}

/// What `check` says about a valid `[wanopt]`.
fn wanopt_summary(w: &WanoptConfig) -> String {
    let mut s = format!(
        "  wanopt: tunnel on {}, {} peer(s), {} service(s), memory store {}{}{}",
        w.tunnel_listen,
        w.peers.len(),
        w.services.len(),
        w.memory_store,
        w.disk_store
            .as_ref()
            .map(|d| format!(", disk store {} in {}", d.size, d.dir.display()))
            .unwrap_or_default(),
        w.intercept
            .as_ref()
            .map(|i| format!(
                ", intercepting on {} ({} rule(s))",
                i.interfaces.join(", "),
                i.rules.len()
            ))
            .unwrap_or_default(),
    );
    for p in &w.peers {
        s.push_str(&format!(
            "\n    peer {} at {}: link {}, rtt {}",
            p.name,
            p.address,
            p.link_rate,
            headway_core::units::format_duration(p.rtt)
        ));
    }
    for v in &w.services {
        s.push_str(&format!(
            "\n    service {}: {} -> {} via {} ({})",
            v.id,
            v.listen,
            v.target,
            v.peer,
            v.class.as_str()
        ));
    }
    s
}

/// `headway run -c FILE`.
pub fn run(path: &Path) -> Result<(), Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| headway_config::ConfigError::Read {
            path: path.display().to_string(),
            source,
        })
        .map_err(|e| Failure::Usage(e.into()))?;
    let cfg =
        Config::parse(&text, &path.display().to_string()).map_err(|e| Failure::Usage(e.into()))?;
    let adc = (!cfg.adc.is_empty()).then(|| (path.to_path_buf(), text, cfg.clone()));
    serve(Roles {
        admin: cfg.admin,
        links: cfg.links,
        wanopt: cfg.wanopt,
        runtime: cfg.runtime,
        adc,
    })
}

/// What one `headway run` runs.
struct Roles {
    admin: AdminConfig,
    links: Vec<LinkConfig>,
    wanopt: Option<WanoptConfig>,
    runtime: RuntimeConfig,
    /// The config file (path, text, validated) when it has ADC sections.
    adc: Option<(PathBuf, String, Config)>,
}

/// Starts every link, the WAN optimizer and the ADC if configured, and the admin API, prints
/// `ready`, and runs until SIGINT/SIGTERM.
fn serve(roles: Roles) -> Result<(), Failure> {
    let Roles {
        admin,
        links,
        wanopt,
        runtime: runtime_cfg,
        adc,
    } = roles;
    let wanopt = wanopt.as_ref();
    // Loads the identity before anything starts: a bad certificate is reported first.
    let appliance = wanopt.map(crate::wanopt::appliance_config).transpose()?;
    let identity_files = wanopt
        .map(crate::wanopt::identity_files)
        .unwrap_or_default();
    let mut bridges = Vec::with_capacity(links.len());
    for l in links {
        let seed = l.seed.unwrap_or_else(headway_core::Rng::seed_from_entropy);
        tracing::info!(link = %l.name, seed, "starting emulated link");
        let bridge = Bridge::start_with(
            BridgeConfig {
                name: l.name.clone(),
                a: l.a,
                b: l.b,
                a_to_b: l.a_to_b,
                b_to_a: l.b_to_a,
                seed,
            },
            Tuning {
                realtime: l.realtime,
                ..Tuning::default()
            },
        )
        .map_err(|e| Failure::Usage(anyhow::Error::new(e).context(format!("link {}", l.name))))?;
        bridges.push(bridge);
    }
    let handles: Vec<BridgeHandle> = bridges.iter().map(Bridge::handle).collect();
    let mut registry = prometheus_client::registry::Registry::with_prefix("headway");
    for h in &handles {
        h.register(&mut registry);
    }
    // With an ADC, `workers` is its data-plane threads (one per CPU by default), and this
    // runtime runs the control plane: the admin API, health monitors, reloads (and the WAN
    // optimizer's flows, if any: two threads for its codec work on both directions). Without
    // one, `workers` sizes this runtime: two for the appliance's flows by default, else one.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let adc_workers = runtime_cfg.workers.unwrap_or(cpus);
    let workers = if adc.is_some() {
        if appliance.is_some() {
            2
        } else {
            1
        }
    } else {
        runtime_cfg
            .workers
            .unwrap_or(if appliance.is_some() { 2 } else { 1 })
    };
    let grace = runtime_cfg.shutdown_grace;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(Failure::Runtime)?;
    let result = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(admin.listen)
            .await
            .with_context(|| format!("cannot listen on {} for the admin API", admin.listen))
            .map_err(Failure::Usage)?;
        let view = match appliance {
            Some(cfg) => Some(crate::wanopt::start(cfg, &identity_files).await?),
            None => None,
        };
        let adc = match adc {
            Some((path, text, cfg)) => {
                let seed = headway_core::Rng::seed_from_entropy();
                tracing::info!(seed, "starting the ADC");
                let proxy = headway_proxy::Proxy::start_with(cfg.adc.clone(), seed, adc_workers)
                    .await
                    .map_err(|e| Failure::Usage(anyhow::Error::new(e)))?;
                let handle = crate::adc::AdcHandle::new(proxy, path, text, cfg);
                tokio::spawn(reload_on_hangup(handle.clone()));
                Some(handle)
            }
            None => None,
        };
        // Also without an ADC: the signal's default action would end the process.
        tokio::spawn(reopen_logs_on_usr1(adc.clone()));
        let state = AdminState::with_roles(
            Arc::new(EmulatedLinks { handles }),
            view.clone().map(|v| v as Arc<dyn WanoptControl>),
            adc.clone().map(|a| Arc::new(a) as Arc<dyn AdcControl>),
            registry,
            admin.token.clone(),
        );
        println!("ready");
        tracing::info!(admin = %admin.listen, "serving");
        let served = headway_admin::serve(listener, state, shutdown_signal())
            .await
            .context("admin API failed")
            .map_err(Failure::Runtime);
        if let Some(a) = adc {
            tracing::info!(grace = ?grace, "draining the ADC's connections");
            a.proxy().shutdown(grace).await;
        }
        if let Some(v) = view {
            v.stop();
        }
        served
    });
    for b in bridges {
        let stats = b.stop();
        tracing::info!(?stats, "link stopped");
    }
    result
}

/// Reads the config file again on every SIGHUP (as `headway ctl config reload` does).
async fn reload_on_hangup(adc: crate::adc::AdcHandle) {
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP; reload through the admin API");
            return;
        }
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the config file");
        if let Ok(r) = adc.reload().await {
            tracing::info!(generation = r.generation, "reloaded");
        }
    }
}

/// Opens the access log files again on every SIGUSR1 (NGINX's signal for it: a `postrotate`
/// step of logrotate's `copytruncate`-less rotation, or after a permission fix; a moved or
/// deleted file is followed without it).
async fn reopen_logs_on_usr1(adc: Option<crate::adc::AdcHandle>) {
    let mut usr1 = match tokio::signal::unix::signal(
        tokio::signal::unix::SignalKind::user_defined1(),
    ) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGUSR1; moved access logs are still followed");
            return;
        }
    };
    while usr1.recv().await.is_some() {
        let files = adc.as_ref().map_or(0, |a| a.proxy().reopen_logs());
        tracing::info!(files, "SIGUSR1: reopening the access logs");
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// The admin API's view of the running emulated links.
struct EmulatedLinks {
    handles: Vec<BridgeHandle>,
}

impl EmulatedLinks {
    fn find(&self, name: &str) -> Option<&BridgeHandle> {
        self.handles.iter().find(|h| h.name() == name)
    }
}

impl LinkControl for EmulatedLinks {
    fn names(&self) -> Vec<String> {
        self.handles.iter().map(|h| h.name().to_string()).collect()
    }

    fn get(&self, name: &str) -> Option<LinkView> {
        let h = self.find(name)?;
        let (a, b) = h.interfaces();
        Some(LinkView {
            name: name.to_string(),
            a,
            b,
            a_to_b: h.params(Direction::AtoB),
            b_to_a: h.params(Direction::BtoA),
            stats: serde_json::to_value(h.stats()).unwrap_or_default(),
        })
    }

    fn set(
        &self,
        name: &str,
        a_to_b: Option<Params>,
        b_to_a: Option<Params>,
    ) -> Result<(), String> {
        let h = self
            .find(name)
            .ok_or_else(|| format!("no link named {name}"))?;
        if let Some(p) = a_to_b {
            h.set_params(Direction::AtoB, p);
        }
        if let Some(p) = b_to_a {
            h.set_params(Direction::BtoA, p);
        }
        Ok(())
    }
}

/// `group NAME`, or what the proxy answers itself (`redirect 301 https://{host}{uri}`).
fn action(a: &headway_config::adc::Action) -> String {
    match a.group() {
        Some(g) => format!("group {g}"),
        None => a.to_string(),
    }
}
