//! Headway's admin API: the REST endpoints, Prometheus exposition, and the `headway ctl` client.
//!
//! This crate owns the admin listener's HTTP surface and its client. It does not own the things
//! it controls: the binary implements [`LinkControl`] over whatever runs the links,
//! [`WanoptControl`] over the WAN-optimizer appliance and [`AdcControl`] over the proxy (this
//! crate depends on neither the emulator nor the appliance; it shares the proxy's snapshot
//! types) and hands in the Prometheus registry its roles have registered
//! their metrics in. The appliance's metrics are collected on scrape ([`WanoptCollector`]).
//!
//! ## Routes
//!
//! | route | answer |
//! |---|---|
//! | `GET /healthz` | `200 ok` (never needs a token) |
//! | `GET /metrics` | the registry as OpenMetrics text, plus the admin API's own request counters |
//! | `GET /api/v1/links` | `{"links": [LinkViewJson, …]}` |
//! | `GET /api/v1/links/{name}` | one [`LinkViewJson`], or 404 |
//! | `PUT /api/v1/links/{name}` | body [`SetLinkRequest`]; 200 with the new view, 400 for a bad spec (nothing applied), 404 unknown link |
//! | `GET /api/v1/wanopt/stats` (also `/wanopt/stats`) | the WAN optimizer's [`WanoptStats`], or 404 when none runs |
//! | `GET /api/v1/adc` | the ADC's [`AdcSnapshot`] (virtual servers, groups, servers: config, state, counters), or 404 when none runs |
//! | `GET /api/v1/adc/groups/{group}/servers/{server}` | one [`ServerSnapshot`] |
//! | `GET /api/v1/certificates` | the ADC's TLS certificates ([`CertificateSnapshot`]: names, issuer, validity, users), or 404 when no ADC runs |
//! | `POST /api/v1/adc/groups/{group}/servers` | body [`AddServerRequest`] (`{"name": "s3", "address": "10.0.0.7:8080"}`, optionally `weight`, `backup`): adds the server to the running config, validated as a file would be; 200 with the [`ReloadReport`], 404 for no such group, 400 with the reason |
//! | `DELETE /api/v1/adc/groups/{group}/servers/{server}` | removes the server from the running config (requests in flight to it finish; its persistent clients fail over); 200 with the [`ReloadReport`] |
//! | `PUT /api/v1/adc/groups/{group}/servers/{server}` | body [`SetServerRequest`] (`{"state": "draining"}`, `{"weight": 5}`, or both): enable, disable or drain; set the weight (0–1000, kept until the config file gives another); 200 with the server |
//! | `GET /api/v1/config` | the running config file's text |
//! | `PUT /api/v1/config` | body: a whole config file (TOML, ≤ 1 MiB); validated, then its ADC sections applied live; 200 [`ReloadReport`], 400 with `file:line:col: …` (nothing changed) |
//! | `POST /api/v1/config/reload` | the config file read from disk again and applied the same way (what SIGHUP does) |
//!
//! Errors are JSON objects `{"error": "…"}`. When a token is configured, every route except
//! `/healthz` requires `Authorization: Bearer <token>` (401 otherwise). Request bodies are
//! limited to [`BODY_LIMIT`] bytes (413 beyond).
//!
//! ## Entry points
//!
//! - Server: [`AdminState::new`] or [`AdminState::with_wanopt`], then [`serve`] (or [`router`] to embed the routes).
//! - Client: [`Client`] (blocking), and [`CtlArgs`] + [`run`] for `headway ctl`.
#![forbid(unsafe_code)]

mod adc;
mod cache;
mod client;
mod control;
mod ctl;
mod server;
mod wanopt;

pub use adc::{
    write_adc, write_certificates, AdcCollector, AdcControl, AdcSnapshot, AddServerRequest,
    BoxFuture, CertificateSnapshot, GroupSnapshot, ReloadReport, ServerSnapshot, SetServerRequest,
    TlsSnapshot, VirtualServerSnapshot,
};
pub use cache::{write_cache, CacheGroupSnapshot, CacheSnapshot, Purge, PurgeQuery, PurgeReport};
pub use client::{Client, ClientError};
pub use control::{LinkControl, LinkView, LinkViewJson, SetLinkRequest};
pub use ctl::{
    run, run_to, AdcCommand, CacheCommand, ConfigCommand, CtlArgs, CtlCommand, LinkCommand,
    WanoptCommand,
};
pub use server::{router, serve, AdminState, BODY_LIMIT, CONFIG_LIMIT, OPENMETRICS_CONTENT_TYPE};
pub use wanopt::{
    write_flows, write_stats, WanoptCollector, WanoptControl, WanoptFlow, WanoptGroup, WanoptPath,
    WanoptStats, WanoptStore, WanoptTunnel,
};
