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
}

impl AdcHandle {
    /// Wraps a started proxy; `text` and `config` are the file it was started from.
    pub fn new(proxy: Proxy, path: PathBuf, text: String, config: Config) -> AdcHandle {
        AdcHandle {
            proxy,
            path,
            running: Arc::new(Mutex::new((text, config))),
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

impl AdcControl for AdcHandle {
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
