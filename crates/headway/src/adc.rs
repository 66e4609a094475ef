//! The ADC role of `headway run`: starting the proxy from the config's `[[virtual_server]]`,
//! `[[server_group]]` and `[[monitor]]` sections, live config changes (admin API and SIGHUP),
//! and the admin API's view of it ([`AdcHandle`], an [`AdcControl`]).
//!
//! A config change is the whole file: it is validated as at start-up, and only its ADC
//! sections may differ from the running file's — `[admin]`, `[runtime]`, `[[link]]` and
//! `[wanopt]` are read at start only, so a change to them is refused with a message that says
//! a restart is needed. A refused change leaves everything running as it was.

use std::path::PathBuf;
use std::sync::Arc;

use headway_admin::{AdcControl, AdcSnapshot, BoxFuture, ReloadReport};
use headway_config::Config;
use headway_lb::health::AdminState;
use headway_proxy::{Proxy, StateError};
use parking_lot::Mutex;

/// The running ADC and the config file it came from. Clones share everything.
#[derive(Clone)]
pub struct AdcHandle {
    proxy: Proxy,
    path: PathBuf,
    /// The running file's text and its validated form.
    running: Arc<Mutex<(String, Config)>>,
    /// Held by a server being added or removed from the text's read to its apply, so that
    /// two such edits at once do not each apply the text without the other's.
    edits: Arc<tokio::sync::Mutex<()>>,
}

impl AdcHandle {
    /// Wraps a started proxy; `text` and `config` are the file it was started from.
    pub fn new(proxy: Proxy, path: PathBuf, text: String, config: Config) -> AdcHandle {
        AdcHandle {
            proxy,
            path,
            running: Arc::new(Mutex::new((text, config))),
            edits: Arc::default(),
        }
    }

    /// The proxy.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Validates `text` (named `origin` in messages) and applies its ADC sections.
    async fn apply(self, text: String, origin: String) -> Result<ReloadReport, String> {
        let refuse = |m: String| {
            self.proxy.count_failed_reload();
            tracing::warn!(error = %m, "config change refused; the running config stays");
            Err(m)
        };
        let new = match Config::parse(&text, &origin) {
            Ok(c) => c,
            Err(e) => return refuse(e.to_string()),
        };
        {
            let (_, cur) = &*self.running.lock();
            let mut fixed = Vec::new();
            if new.admin != cur.admin {
                fixed.push("[admin]");
            }
            if new.runtime != cur.runtime {
                fixed.push("[runtime]");
            }
            if new.links != cur.links {
                fixed.push("[[link]]");
            }
            if new.wanopt != cur.wanopt {
                fixed.push("[wanopt]");
            }
            if !fixed.is_empty() {
                return refuse(format!(
                    "{origin}: {} changed, and only the ADC sections ([[virtual_server]], \
                     [[server_group]], [[monitor]]) change live: restart `headway run` for the \
                     others",
                    fixed.join(", ")
                ));
            }
        }
        let report = ReloadReport {
            generation: 0,
            virtual_servers: new.adc.virtual_servers.len(),
            groups: new.adc.groups.len(),
        };
        match self.proxy.replace(new.adc.clone()).await {
            Ok(generation) => {
                *self.running.lock() = (text, new);
                tracing::info!(generation, origin = %origin, "config applied");
                Ok(ReloadReport {
                    generation,
                    ..report
                })
            }
            Err(e) => {
                let m = format!("{origin}: {e}");
                tracing::warn!(error = %m, "config change refused; the running config stays");
                Err(m)
            }
        }
    }
}

/// Where `server` of `group` is in `text`'s `[[server_group]]` tables, edited by `edit` (given
/// the group's `[[server_group.server]]` tables and the group's name): the edited text.
/// `Err((true, _))`: no such group; `(false, _)`: the edit was refused.
fn edit_servers(
    text: &str,
    group: &str,
    edit: impl FnOnce(&mut toml_edit::ArrayOfTables) -> Result<(), (bool, String)>,
) -> Result<String, (bool, String)> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| (false, format!("the running config cannot be edited: {e}")))?;
    let no_group = || (true, format!("no server group named {group:?}"));
    let g = doc
        .get_mut("server_group")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
        .and_then(|gs| {
            gs.iter_mut()
                .find(|t| t.get("name").and_then(toml_edit::Item::as_str) == Some(group))
        })
        .ok_or_else(no_group)?;
    if !g.contains_key("server") {
        g.insert(
            "server",
            toml_edit::Item::ArrayOfTables(toml_edit::ArrayOfTables::new()),
        );
    }
    let servers = g
        .get_mut("server")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
        .ok_or_else(|| {
            (
                false,
                format!(
                    "group {group:?} writes its servers as an inline array: edit the file \
                     (`headway ctl config replace`), or write them as [[server_group.server]] \
                     tables"
                ),
            )
        })?;
    edit(servers)?;
    Ok(doc.to_string())
}

/// A server table's name as the config names it: `name`, else its address.
fn server_name(t: &toml_edit::Table) -> Option<&str> {
    t.get("name")
        .or_else(|| t.get("address"))
        .and_then(toml_edit::Item::as_str)
}

impl AdcHandle {
    /// Edits the running text's servers of `group` and applies the result (see
    /// [`AdcControl::add_server`]); `what` names the change in messages.
    async fn change_servers(
        self,
        group: String,
        what: String,
        edit: impl FnOnce(&mut toml_edit::ArrayOfTables) -> Result<(), (bool, String)>,
    ) -> Result<ReloadReport, (bool, String)> {
        let _one_at_a_time = self.edits.clone().lock_owned().await;
        let text = self.running.lock().0.clone();
        let edited = edit_servers(&text, &group, edit)?;
        self.apply(edited, format!("<the admin API: {what}>"))
            .await
            .map_err(|m| (false, m))
    }
}

impl AdcControl for AdcHandle {
    fn add_server(
        &self,
        group: String,
        server: headway_admin::AddServerRequest,
    ) -> BoxFuture<Result<ReloadReport, (bool, String)>> {
        let what = format!("add server {group}/{}", server.name);
        Box::pin(
            self.clone()
                .change_servers(group.clone(), what, move |servers| {
                    if servers.iter().any(|t| server_name(t) == Some(&server.name)) {
                        return Err((
                            false,
                            format!(
                                "group {group:?} already has a server named {:?}",
                                server.name
                            ),
                        ));
                    }
                    let mut t = toml_edit::Table::new();
                    t.insert("name", toml_edit::value(server.name.as_str()));
                    t.insert("address", toml_edit::value(server.address.as_str()));
                    if let Some(w) = server.weight {
                        t.insert("weight", toml_edit::value(i64::from(w)));
                    }
                    if let Some(b) = server.backup {
                        t.insert("backup", toml_edit::value(b));
                    }
                    servers.push(t);
                    Ok(())
                }),
        )
    }

    fn remove_server(
        &self,
        group: String,
        server: String,
    ) -> BoxFuture<Result<ReloadReport, (bool, String)>> {
        let what = format!("remove server {group}/{server}");
        Box::pin(
            self.clone()
                .change_servers(group.clone(), what, move |servers| {
                    let at = servers
                        .iter()
                        .position(|t| server_name(t) == Some(&server))
                        .ok_or_else(|| {
                            (
                                true,
                                format!("server group {group:?} has no server named {server:?}"),
                            )
                        })?;
                    servers.remove(at);
                    Ok(())
                }),
        )
    }

    fn snapshot(&self) -> AdcSnapshot {
        self.proxy.snapshot()
    }

    fn set_server_state(
        &self,
        group: &str,
        server: &str,
        state: &str,
    ) -> Result<(), (bool, String)> {
        let state = match state {
            "enabled" | "enable" => AdminState::Enabled,
            "disabled" | "disable" => AdminState::Disabled,
            "draining" | "drain" => AdminState::Draining,
            other => {
                return Err((
                    false,
                    format!("unknown state `{other}`: use enabled, disabled or draining"),
                ))
            }
        };
        self.proxy
            .set_server_state(group, server, state)
            .map_err(|e: StateError| (true, e.to_string()))
    }

    fn set_server_weight(
        &self,
        group: &str,
        server: &str,
        weight: u32,
    ) -> Result<(), (bool, String)> {
        self.proxy
            .set_server_weight(group, server, weight)
            .map_err(|e: StateError| (!matches!(e, StateError::BadWeight(_)), e.to_string()))
    }

    fn config_text(&self) -> String {
        self.running.lock().0.clone()
    }

    fn replace_config(&self, text: String) -> BoxFuture<Result<ReloadReport, String>> {
        Box::pin(
            self.clone()
                .apply(text, "<config from the admin API>".into()),
        )
    }

    fn purge_cache(
        &self,
        purge: headway_admin::Purge,
    ) -> Result<headway_admin::PurgeReport, (bool, String)> {
        self.proxy
            .purge_cache(&purge)
            .map_err(|e| (true, e.to_string()))
    }

    fn reload(&self) -> BoxFuture<Result<ReloadReport, String>> {
        let me = self.clone();
        Box::pin(async move {
            let path = me.path.display().to_string();
            match std::fs::read_to_string(&me.path) {
                Ok(text) => me.apply(text, path).await,
                Err(e) => {
                    me.proxy.count_failed_reload();
                    Err(format!("{path}: cannot read the config file: {e}"))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
[[server_group]]
name = \"a\"
# the first group's only server
[[server_group.server]]
name = \"a1\"
address = \"127.0.0.1:8001\"

[[server_group]]
name = \"b\"
[[server_group.server]]
address = \"127.0.0.1:8002\"

[[virtual_server]]
name = \"front\"
kind = \"http\"
listen = \"127.0.0.1:8000\"
group = \"a\"
";

    fn servers_of(text: &str, group: &str) -> Vec<String> {
        let c = Config::parse(text, "edited").unwrap();
        let g = c.adc.groups.iter().find(|g| g.name == group).unwrap();
        g.servers.iter().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn a_server_lands_in_its_own_group_and_the_rest_of_the_file_stays() {
        let edited = edit_servers(TEXT, "a", |servers| {
            let mut t = toml_edit::Table::new();
            t.insert("name", toml_edit::value("a2"));
            t.insert("address", toml_edit::value("127.0.0.1:8003"));
            servers.push(t);
            Ok(())
        })
        .unwrap();
        assert_eq!(servers_of(&edited, "a"), ["a1", "a2"], "{edited}");
        assert_eq!(servers_of(&edited, "b"), ["127.0.0.1:8002"], "{edited}");
        assert!(
            edited.contains("# the first group's only server"),
            "{edited}"
        );
        // Removed by name, or by address for a server without one.
        let edited = edit_servers(&edited, "b", |servers| {
            let at = servers
                .iter()
                .position(|t| server_name(t) == Some("127.0.0.1:8002"))
                .unwrap();
            servers.remove(at);
            servers.push({
                let mut t = toml_edit::Table::new();
                t.insert("address", toml_edit::value("127.0.0.1:8004"));
                t
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(servers_of(&edited, "b"), ["127.0.0.1:8004"], "{edited}");
        assert_eq!(servers_of(&edited, "a"), ["a1", "a2"], "{edited}");
        assert!(matches!(
            edit_servers(TEXT, "c", |_| Ok(())),
            Err((true, m)) if m.contains("no server group named \"c\"")
        ));
    }
}
