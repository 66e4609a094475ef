//! The validated runtime configuration and its one conversion from the file schema.
//!
//! This module owns [`Config`] and every check that spans more than one value: unique link
//! names, valid and distinct interface names, a token for an exposed admin API, and each link
//! direction's [`Params`] built from its specs and validated. The `[wanopt]` section's checks
//! live in [`crate::wanopt`] and the ADC's in [`crate::adc`], called from here. Nothing else in Headway validates
//! configuration: a [`Config`] is correct by construction.
//!
//! Entry points: [`Config::from_file`], [`Config::parse`], or `Config::try_from(ConfigFile)`.

use std::collections::HashMap;
use std::fmt;
use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use headway_link::{Params, ParamsError};
use toml::Spanned;

use crate::adc::{AdcConfig, RuntimeConfig};
use crate::file::{AdminSection, ConfigFile, LinkSection, Origin};
use crate::spec::{LinkSpecInput, SpecError};
use crate::wanopt::WanoptConfig;

/// The admin API's default listen address.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9090);

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The admin API listener.
    pub admin: AdminConfig,
    /// The emulated WAN links, in file order; names and interfaces are unique.
    pub links: Vec<LinkConfig>,
    /// The WAN-optimizer appliance, if `[wanopt]` is present.
    pub wanopt: Option<WanoptConfig>,
    /// Process-wide runtime settings (`[runtime]`).
    pub runtime: RuntimeConfig,
    /// The ADC (`[[virtual_server]]`, `[[server_group]]`, `[[monitor]]`); empty when absent.
    pub adc: AdcConfig,
}

impl Config {
    /// Reads and validates the TOML file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Config::parse(&text, &shown)
    }

    /// Parses and validates TOML `text`. `path` names the file in messages and is the directory
    /// relative `token_file` paths are resolved against. Never panics, whatever the text.
    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        Config::try_from(ConfigFile::parse(text, path)?)
    }
}

/// The admin API listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The bearer token required on every route except `/healthz`; `None` means no
    /// authentication (only allowed on loopback).
    pub token: Option<String>,
}

impl AdminConfig {
    /// An admin listener; an address other than loopback requires a non-empty token.
    pub fn new(listen: SocketAddr, token: Option<String>) -> Result<AdminConfig, AdminError> {
        if token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(AdminError::EmptyToken);
        }
        if token.is_none() && !listen.ip().is_loopback() {
            return Err(AdminError::TokenRequired { listen });
        }
        Ok(AdminConfig { listen, token })
    }
}

impl Default for AdminConfig {
    /// `127.0.0.1:9090`, no token.
    fn default() -> Self {
        AdminConfig {
            listen: DEFAULT_ADMIN_LISTEN,
            token: None,
        }
    }
}

/// Why an admin listener's settings are not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// A non-loopback address without a token would expose link control to the network.
    #[error(
        "the admin API on {listen} would be reachable from other hosts without authentication: \
         set a token (`token` or `token_file` in [admin], or --token / HEADWAY_TOKEN), or listen \
         on 127.0.0.1"
    )]
    TokenRequired {
        /// The address asked for.
        listen: SocketAddr,
    },
    /// The token is empty or only whitespace.
    #[error("the admin token is empty: set a non-empty token or remove it")]
    EmptyToken,
}

/// One validated emulated WAN link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Name in the admin API and metrics (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// First interface.
    pub a: String,
    /// Second interface (differs from `a`).
    pub b: String,
    /// Seed of the link's random sequence; `None` means draw one at start-up.
    pub seed: Option<u64>,
    /// Parameters of the a→b direction (validated).
    pub a_to_b: Params,
    /// Parameters of the b→a direction (validated).
    pub b_to_a: Params,
    /// Real-time (SCHED_FIFO) priority of the link's release threads, 1–99; `None`: normal.
    pub realtime: Option<u8>,
}

/// Why a config file was rejected. The message says where (file, line, column) and what to
/// change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the config file: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not TOML, or does not match the schema (unknown key, wrong type, a value
    /// that does not parse).
    #[error("{at}: {message}")]
    Syntax {
        /// Where.
        at: Location,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// The values are well-formed but not acceptable (duplicate names, `a` = `b`, a spec whose
    /// parameters are out of range, an exposed admin API without a token, …).
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Location,
        /// What is wrong and what to change.
        message: String,
    },
}

impl ConfigError {
    /// Where in the file the error is, if it is about the file's content.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Syntax { at, .. } | ConfigError::Invalid { at, .. } => Some(at),
        }
    }
}

/// A place in a config file. Lines and columns count from 1; columns count characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file, as given to [`Config::parse`] or [`Config::from_file`].
    pub path: String,
    /// The line, when known.
    pub line: Option<usize>,
    /// The column, when known.
    pub column: Option<usize>,
}

impl fmt::Display for Location {
    /// `path:line:column`, or `path` when the position is unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        Ok(())
    }
}

impl TryFrom<ConfigFile> for Config {
    type Error = ConfigError;

    /// Validates a parsed file. Reads `token_file` if one is given.
    fn try_from(file: ConfigFile) -> Result<Config, ConfigError> {
        let origin = &file.origin;
        let admin = admin(&file.admin, origin)?;
        let mut links = Vec::with_capacity(file.link.len());
        // Where each name and interface was first seen, for "used twice" messages.
        let mut names: HashMap<&str, Option<usize>> = HashMap::new();
        let mut ifaces: HashMap<&str, (&str, Option<usize>)> = HashMap::new();
        for l in &file.link {
            let name = l.name.get_ref().as_str();
            let at_name = origin.locate(Some(l.name.span()));
            check_name(name, "link").map_err(|m| invalid(at_name.clone(), m))?;
            if let Some(first) = names.insert(name, at_name.line) {
                return Err(invalid(
                    at_name,
                    format!(
                        "link name `{name}` is used twice{}: give each link its own name",
                        first
                            .map(|l| format!(" (first on line {l})"))
                            .unwrap_or_default()
                    ),
                ));
            }
            for iface in [&l.a, &l.b] {
                let at = origin.locate(Some(iface.span()));
                let i = iface.get_ref().as_str();
                check_interface(i)
                    .map_err(|m| invalid(at.clone(), format!("link `{name}`: {m}")))?;
            }
            if l.a.get_ref() == l.b.get_ref() {
                return Err(invalid(
                    origin.locate(Some(l.b.span())),
                    format!(
                        "link `{name}`: `a` and `b` are both `{}`: a link joins two different \
                         interfaces",
                        l.b.get_ref()
                    ),
                ));
            }
            for iface in [&l.a, &l.b] {
                let at = origin.locate(Some(iface.span()));
                let i = iface.get_ref().as_str();
                if let Some((other, line)) = ifaces.insert(i, (name, at.line)) {
                    return Err(invalid(
                        at,
                        format!(
                            "link `{name}`: interface `{i}` is already used by link `{other}`{}: \
                             each interface can belong to one link only",
                            line.map(|l| format!(" (line {l})")).unwrap_or_default()
                        ),
                    ));
                }
            }
            links.push(link(l, origin)?);
        }
        let wanopt = match &file.wanopt {
            Some(w) => Some(crate::wanopt::wanopt(w.get_ref(), origin)?),
            None => None,
        };
        let runtime = crate::adc::runtime(file.runtime.as_ref(), origin)?;
        let mut adc = crate::adc::adc(
            &file.monitor,
            &file.server_group,
            &file.virtual_server,
            &file.certificate,
            origin,
        )?;
        crate::tcp::attach(
            &mut adc,
            &file.tcp_profile,
            &file.server_group,
            &file.virtual_server,
            origin,
        )?;
        crate::cache::attach(&mut adc, file.cache.as_ref(), origin)?;
        Ok(Config {
            admin,
            links,
            wanopt,
            runtime,
            adc,
        })
    }
}

pub(crate) fn invalid(at: Location, message: String) -> ConfigError {
    ConfigError::Invalid { at, message }
}

fn admin(s: &AdminSection, origin: &Origin) -> Result<AdminConfig, ConfigError> {
    let listen = match &s.listen {
        None => DEFAULT_ADMIN_LISTEN,
        Some(l) => l.get_ref().trim().parse::<SocketAddr>().map_err(|_| {
            invalid(
                origin.locate(Some(l.span())),
                format!(
                    "admin listen `{}` is not a socket address: write an IP address and a port, \
                     e.g. `127.0.0.1:9090` or `[::1]:9090`",
                    l.get_ref()
                ),
            )
        })?,
    };
    let token = match (&s.token, &s.token_file) {
        (Some(_), Some(f)) => {
            return Err(invalid(
                origin.locate(Some(f.span())),
                "give either `token` or `token_file` in [admin], not both".into(),
            ))
        }
        (Some(t), None) => Some((t.get_ref().clone(), t.span())),
        (None, Some(f)) => Some((read_token_file(f, origin)?, f.span())),
        (None, None) => None,
    };
    let span = token
        .as_ref()
        .map(|(_, s)| s.clone())
        .or_else(|| s.listen.as_ref().map(Spanned::span));
    AdminConfig::new(listen, token.map(|(t, _)| t.trim().to_string()))
        .map_err(|e| invalid(origin.locate(span), e.to_string()))
}

fn read_token_file(f: &Spanned<PathBuf>, origin: &Origin) -> Result<String, ConfigError> {
    let path = f.get_ref();
    let path = if path.is_relative() {
        Path::new(&origin.path)
            .parent()
            .unwrap_or(Path::new(""))
            .join(path)
    } else {
        path.clone()
    };
    let fail = |why: String| {
        invalid(
            origin.locate(Some(f.span())),
            format!(
                "cannot read the admin token from `{}`: {why}",
                path.display()
            ),
        )
    };
    // Read at most a little more than any sane token, so `/dev/zero` or a huge file is an error,
    // not an out-of-memory.
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|file| file.take(MAX_TOKEN_FILE + 1).read_to_string(&mut text))
        .map_err(|e| fail(e.to_string()))?;
    if text.len() as u64 > MAX_TOKEN_FILE {
        return Err(fail(format!("larger than {MAX_TOKEN_FILE} bytes")));
    }
    Ok(text)
}

/// The largest admin token file read.
const MAX_TOKEN_FILE: u64 = 4096;

fn link(l: &LinkSection, origin: &Origin) -> Result<LinkConfig, ConfigError> {
    let name = l.name.get_ref();
    let apply = |key: &str, spec: &Option<Spanned<LinkSpecInput>>, base: &Params| {
        let Some(spec) = spec else {
            return Ok(base.clone());
        };
        spec.get_ref().0.apply(base).map_err(|e| {
            // Point at the key whose value is out of range when it can be found.
            let span = spec.span();
            let at = match &e {
                SpecError::Invalid(pe) => params_error_keys(pe)
                    .iter()
                    .filter_map(|k| origin.find_key(&span, k))
                    .min(),
                _ => None,
            };
            invalid(
                origin.locate(Some(at.map_or(span, |a| a..a))),
                format!("link `{name}`, {key}: {e}"),
            )
        })
    };
    let base = apply("both", &l.both, &Params::default())?;
    Ok(LinkConfig {
        name: name.clone(),
        a: l.a.get_ref().clone(),
        b: l.b.get_ref().clone(),
        seed: l.seed,
        a_to_b: apply("a_to_b", &l.a_to_b, &base)?,
        b_to_a: apply("b_to_a", &l.b_to_a, &base)?,
        realtime: match &l.realtime {
            Some(p) if !(1..=99).contains(p.get_ref()) => {
                return Err(invalid(
                    origin.locate(Some(p.span())),
                    format!(
                        "realtime priority {} is out of range: use 1 to 99, or leave it out",
                        p.get_ref()
                    ),
                ))
            }
            p => p.as_ref().map(|p| *p.get_ref()),
        },
    })
}

/// The spec keys whose values a [`ParamsError`] is about.
fn params_error_keys(e: &ParamsError) -> &'static [&'static str] {
    match e {
        ParamsError::Mtu(_) => &["mtu"],
        ParamsError::ZeroQueue => &["queue", "queue_bytes"],
        ParamsError::Delay(_) => &["delay"],
        ParamsError::Jitter(_) => &["jitter"],
        _ => &[],
    }
}

/// Link and peer names appear in URLs and metric labels, so they are kept to a safe alphabet.
pub(crate) fn check_name(name: &str, what: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > 64 || !name.chars().all(ok_char) {
        return Err(format!(
            "`{name}` is not a valid {what} name: use 1 to 64 letters, digits, `-`, `_` or `.`"
        ));
    }
    Ok(())
}

/// The rules of Linux's `dev_valid_name`: 1–15 bytes, not `.` or `..`, no `/`, `:` or
/// whitespace.
pub(crate) fn check_interface(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name.len() > 15 {
        "it is longer than 15 bytes"
    } else if name == "." || name == ".." {
        "`.` and `..` are not allowed"
    } else if name.contains(['/', ':']) || name.chars().any(char::is_whitespace) {
        "it contains `/`, `:` or whitespace"
    } else {
        return Ok(());
    };
    Err(format!(
        "`{name}` is not a valid interface name ({why}): write the name `ip link` shows, e.g. \
         `eth0` or `wan0`"
    ))
}

#[cfg(test)]
mod tests;
