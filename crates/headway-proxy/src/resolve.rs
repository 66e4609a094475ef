//! DNS names of servers: resolving them when a config is applied, and again in the background.
//!
//! A server written as `name:port` ([`ServerAddress::Name`]) is looked up through a
//! [`Resolve`] — the system's resolver ([`SystemResolver`]: `/etc/hosts`, then DNS, as
//! `getaddrinfo` does) unless the program gives its own ([`TableResolver`] answers from a
//! table). [`resolve_config`] runs when a config is applied: every name is looked up (at once, each bounded by [`LOOKUP_TIMEOUT`]); a name that
//! fails keeps the address the running generation had for the same server and name, and
//! refuses the config when there is none. [`refresh`] runs per group, every `dns_refresh`: it
//! looks the group's names up again and returns `true` when one now points elsewhere, and the
//! runtime then applies the running config again — the same path as a reload, so nothing is
//! dropped, requests in flight finish on the old address and new ones go to the new one. A
//! failed refresh keeps the address and counts the failure on the server.
//!
//! Which address of several: [`choose`] keeps the one in use while the name still has it (round
//! robin DNS answers in a new order every time, which must not move servers), else takes the
//! first of the preferred family.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use headway_config::adc::{AdcConfig, DnsPrefer, ServerAddress, ServerGroup};

/// Longest wait for one lookup.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// A lookup in progress.
pub type Lookup<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>;

/// Looks names up.
pub trait Resolve: Send + Sync + 'static {
    /// Every address of `host`, with `port`.
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> Lookup<'a>;
}

/// The system's resolver (`getaddrinfo` on a blocking thread, through tokio).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> Lookup<'a> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// A resolver that answers from a table its owner changes: for programs that keep their own
/// service registry, and for tests of names that move or fail. A name not in the table fails.
#[derive(Debug, Default)]
pub struct TableResolver(parking_lot::Mutex<HashMap<String, Vec<std::net::IpAddr>>>);

impl TableResolver {
    /// `host` resolves to `addrs` from now on (an empty list: to nothing).
    pub fn set(&self, host: &str, addrs: &[std::net::IpAddr]) {
        self.0.lock().insert(host.to_string(), addrs.to_vec());
    }

    /// `host` fails to resolve from now on.
    pub fn remove(&self, host: &str) {
        self.0.lock().remove(host);
    }
}

impl Resolve for TableResolver {
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> Lookup<'a> {
        let found = self.0.lock().get(host).cloned();
        Box::pin(async move {
            let found = found.ok_or_else(|| io::Error::other("name not known"))?;
            Ok(found
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect())
        })
    }
}

/// The address to use of those `found` for a name: `current` if still among them, else the
/// first of the `prefer`red family, else the first. `None` when nothing was found.
pub fn choose(
    current: Option<SocketAddr>,
    found: &[SocketAddr],
    prefer: DnsPrefer,
) -> Option<SocketAddr> {
    if let Some(c) = current.filter(|c| found.contains(c)) {
        return Some(c);
    }
    let preferred = |a: &&SocketAddr| match prefer {
        DnsPrefer::Ipv4 => a.is_ipv4(),
        DnsPrefer::Ipv6 => a.is_ipv6(),
    };
    found
        .iter()
        .find(preferred)
        .or_else(|| found.first())
        .copied()
}

/// A named server: its group and its name.
pub type NamedKey = (String, String);

/// The address each named server is connected to, with the address as written (a changed name
/// is a new lookup, not the old address).
pub type Resolved = HashMap<NamedKey, (ServerAddress, SocketAddr)>;

/// Why a server's name gave no address.
#[derive(Debug, thiserror::Error)]
#[error("server group {group}, server {server}: cannot resolve `{host}`: {why}")]
pub struct ResolveError {
    /// The group.
    pub group: String,
    /// The server.
    pub server: String,
    /// The name.
    pub host: String,
    /// What the resolver said.
    pub why: String,
}

/// One lookup, bounded in time; `Err` says why in words.
async fn lookup(resolver: &dyn Resolve, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    match tokio::time::timeout(LOOKUP_TIMEOUT, resolver.lookup(host, port)).await {
        Ok(Ok(v)) if v.is_empty() => Err("no address".into()),
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {LOOKUP_TIMEOUT:?}")),
    }
}

/// The named servers of `group`, with their keys.
fn named(group: &ServerGroup) -> impl Iterator<Item = (NamedKey, &ServerAddress)> + '_ {
    group
        .servers
        .iter()
        .filter(|s| matches!(s.address, ServerAddress::Name { .. }))
        .map(|s| ((group.name.clone(), s.name.clone()), &s.address))
}

/// Looks up every named server of `config`; `last` is what the running generation uses. A
/// name that fails keeps its last address (logged); without one, the config is refused.
pub async fn resolve_config(
    config: &AdcConfig,
    resolver: &dyn Resolve,
    last: &Resolved,
) -> Result<Resolved, ResolveError> {
    let wanted: Vec<(NamedKey, &ServerAddress, DnsPrefer)> = config
        .groups
        .iter()
        .flat_map(|g| named(g).map(|(k, a)| (k, a, g.dns_prefer)))
        .collect();
    let lookups = wanted.iter().map(|(_, a, _)| async move {
        match a {
            ServerAddress::Name { host, port } => lookup(resolver, host, *port).await,
            ServerAddress::Ip(ip) => Ok(vec![*ip]),
        }
    });
    let results = futures_util::future::join_all(lookups).await;
    let mut out = Resolved::new();
    for ((key, written, prefer), found) in wanted.into_iter().zip(results) {
        let kept = last
            .get(&key)
            .filter(|(w, _)| w == written)
            .map(|(_, a)| *a);
        let addr = match found {
            Ok(found) => choose(kept, &found, prefer).expect("a lookup found something"),
            Err(why) => match kept {
                Some(a) => {
                    tracing::warn!(
                        group = %key.0, server = %key.1, address = %written, kept = %a,
                        error = %why, "cannot resolve a server's name; its last address stays"
                    );
                    a
                }
                None => {
                    return Err(ResolveError {
                        group: key.0,
                        server: key.1,
                        host: written.host().unwrap_or_default().to_string(),
                        why,
                    })
                }
            },
        };
        if kept.is_some_and(|k| k != addr) {
            tracing::info!(
                group = %key.0, server = %key.1, address = %written,
                from = %kept.unwrap_or(addr), to = %addr, "a server's name points elsewhere now"
            );
        }
        out.insert(key, (written.clone(), addr));
    }
    Ok(out)
}

/// Looks up the named servers of `group` again. Returns whether one of them now points away
/// from the address in `current`; `failed` is called with the name of each server whose lookup
/// failed (its address stays).
pub async fn refresh(
    group: &ServerGroup,
    resolver: &dyn Resolve,
    current: &Resolved,
    mut failed: impl FnMut(&str),
) -> bool {
    let mut moved = false;
    for (key, written) in named(group) {
        let Some((_, now)) = current.get(&key) else {
            continue;
        };
        let ServerAddress::Name { host, port } = written else {
            continue;
        };
        match lookup(resolver, host, *port).await {
            Ok(found) => moved |= choose(Some(*now), &found, group.dns_prefer) != Some(*now),
            Err(why) => {
                tracing::warn!(
                    group = %key.0, server = %key.1, address = %written, kept = %now,
                    error = %why, "cannot resolve a server's name; its address stays"
                );
                failed(&key.1);
            }
        }
    }
    moved
}

#[cfg(test)]
mod tests;
