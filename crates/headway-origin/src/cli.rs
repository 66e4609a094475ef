//! `headway origin …`: command-line arguments and the blocking entry point.
//!
//! This module owns [`OriginArgs`] (flattened into the `headway` binary's `origin` subcommand)
//! and [`run`], which builds a tokio runtime, binds, and serves until Ctrl-C or SIGTERM. It holds
//! no server logic of its own.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use headway_core::units::parse_duration;

use crate::server::{listen, serve, OriginConfig};

/// Arguments of `headway origin`.
#[derive(Debug, Clone, clap::Args)]
pub struct OriginArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Latency added before every response's headers (e.g. `50ms`); `?latency=` overrides it
    /// per request.
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub latency: Duration,
    /// `Cache-Control` header for documents (e.g. `max-age=60`); none by default.
    #[arg(long)]
    pub cache_control: Option<String>,
    /// This server's name, sent as `X-Origin` on every response (to tell servers apart behind
    /// a load balancer); none by default.
    #[arg(long)]
    pub name: Option<String>,
    /// `/dynamic` requests served at once (an application server's worker pool); the others
    /// wait. 0 = no limit.
    #[arg(long, default_value_t = 0)]
    pub dynamic_concurrency: usize,
    /// Runtime worker threads; default: one per CPU.
    #[arg(long)]
    pub workers: Option<usize>,
}

impl OriginArgs {
    /// The server configuration these arguments describe.
    pub fn config(&self) -> OriginConfig {
        OriginConfig {
            listen: self.listen,
            latency: self.latency,
            cache_control: self.cache_control.clone(),
            name: self.name.clone(),
            dynamic_concurrency: self.dynamic_concurrency,
        }
    }
}

/// Runs the origin until Ctrl-C or SIGTERM, then shuts down gracefully.
///
/// Fails with a one-line message if the runtime cannot start or the address cannot be bound
/// (e.g. `cannot listen on 127.0.0.1:8080: address already in use`).
pub fn run(args: OriginArgs) -> anyhow::Result<()> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = args.workers {
        anyhow::ensure!(n > 0, "--workers must be at least 1");
        builder.worker_threads(n);
    }
    let rt = builder.build().context("cannot start the runtime")?;
    rt.block_on(async {
        let cfg = args.config();
        let listener = listen(cfg.listen).await?;
        serve(listener, cfg, stop_signal()).await?;
        Ok(())
    })
}

/// Completes on Ctrl-C or SIGTERM (or never, if neither can be listened for).
async fn stop_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("ctrl-c: shutting down"),
        () = term => tracing::info!("sigterm: shutting down"),
    }
}
