//! Headway's configuration: the file schema, the link spec syntax, and their conversion into
//! validated runtime types.
//!
//! This crate owns everything users write to configure Headway — the TOML file and the
//! one-line link specs used on the command line and in the admin API — and the single place
//! where it is validated ("parse, don't validate"). It does not start anything, open sockets or
//! touch interfaces; the binary takes a [`Config`] and wires the roles.
//!
//! ## Two layers
//!
//! 1. [`file::ConfigFile`]: what serde reads (`deny_unknown_fields`, units typed as
//!    `"1.5mbit"`, `"150ms"`, `"64KiB"`), with source spans kept for messages.
//! 2. [`Config`]: validated runtime types, built once with `TryFrom<ConfigFile>`. Each link
//!    direction is a validated [`headway_link::Params`]; the `[wanopt]` section becomes a
//!    [`WanoptConfig`] ([`wanopt`]), with its certificate, key and dedup key files read.
//!
//! [`LinkSpec`] is the partial, user-facing form of one link direction's parameters; its text
//! syntax and keys are documented in [`spec`].
//!
//! ## Entry points
//!
//! - [`Config::from_file`] / [`Config::parse`]: a file to a [`Config`], or a [`ConfigError`]
//!   that reads `headway.toml:7:9: unknown field `dely`, expected one of … — did you mean
//!   `delay`?`.
//! - `"rate=1.5mbit delay=150ms".parse::<LinkSpec>()`, [`LinkSpec::apply`],
//!   `Params::try_from(&spec)` and `LinkSpec::from(&params)`.
//!
//! `crates/headway-config/examples/headway.toml` is a complete, commented config file;
//! `examples/wanopt-branch.toml` and `examples/wanopt-dc.toml` are the two ends of a WAN
//! optimizer pair.
//!
//! ## Modules
//!
//! | module | owns |
//! |---|---|
//! | [`file`] | the TOML schema as written (serde, spans) |
//! | `config` | [`Config`], the conversion and the checks of `[admin]` and `[[link]]` |
//! | [`wanopt`] | [`WanoptConfig`] and the checks of `[wanopt]` (peers, services, interception, files) |
//! | [`adc`] | [`AdcConfig`], [`RuntimeConfig`] and the checks of `[runtime]`, `[[monitor]]`, `[[server_group]]`, `[[virtual_server]]` |
//! | [`tls`] | the ADC's TLS material: `[[certificate]]` files read and checked, CA bundles, `tls` subsections |
//! | [`tcp`] | [`TcpProfile`]s: the checks of `[[tcp_profile]]`, the built-in presets of seed 003, route options |
//! | [`compress`] | [`compress::Compression`]: the checks of `[virtual_server.compression]` (codecs, types, levels, CPU bypass) |
//! | [`cache`] | [`cache::CacheConfig`]: the checks of `[cache]` (content groups, policies, memory limits) |
//! | [`spec`] | the link spec syntax ([`LinkSpec`]) |
//! | `suggest` | did-you-mean suggestions |
#![forbid(unsafe_code)]

pub mod adc;
pub mod cache;
pub mod compress;
mod config;
pub mod file;
pub mod spec;
mod suggest;
pub mod tcp;
pub mod tls;
pub mod wanopt;

pub use adc::{AdcConfig, RuntimeConfig};
pub use config::{
    AdminConfig, AdminError, Config, ConfigError, LinkConfig, Location, DEFAULT_ADMIN_LISTEN,
};
pub use spec::{
    Dir, JitterDist, Limit, LinkSpec, LinkSpecInput, LossSpec, Overhead, SpecError, UnknownDir,
};
pub use tcp::TcpProfile;
pub use wanopt::WanoptConfig;
