//! A blocking client of the admin API (ureq), used by `headway ctl` and by tests.
//!
//! Owns the HTTP calls and the mapping of failures to [`ClientError`]s that say what to do
//! (start the instance, pass a token, fix the spec). It does not format output; see `ctl`.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use crate::adc::{AdcSnapshot, CertificateSnapshot, ReloadReport, ServerSnapshot};
use crate::control::LinkViewJson;
use crate::wanopt::WanoptStats;

/// A request body.
enum Body {
    None,
    Json(serde_json::Value),
    Text(String),
}

/// A client of one Headway instance's admin API.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// Why an admin API call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No connection could be made.
    #[error("cannot reach the admin API at {url}: {reason} (is `headway run` running?)")]
    Unreachable {
        /// The base URL.
        url: String,
        /// What went wrong, e.g. `connection refused`.
        reason: String,
    },
    /// The API refused the token (or none was given and one is required).
    #[error(
        "the admin API at {url} refused the request: {message} (give the token with --token or \
         HEADWAY_TOKEN)"
    )]
    Unauthorized {
        /// The base URL.
        url: String,
        /// The API's message.
        message: String,
    },
    /// The API answered with an error status.
    #[error("{message} (HTTP {status})")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// The answer was not what the API sends (wrong URL? another program on that port?).
    #[error("unexpected answer from {url}: {reason}")]
    Protocol {
        /// The URL called.
        url: String,
        /// What was wrong.
        reason: String,
    },
}

impl ClientError {
    /// The HTTP status, for errors the API answered with.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            ClientError::Unauthorized { .. } => Some(401),
            _ => None,
        }
    }
}

impl Client {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:9090`), sending `token` as a
    /// bearer token when given.
    pub fn new(base: impl Into<String>, token: Option<String>) -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(60)))
            .build();
        let base = base.into();
        // `127.0.0.1:9090` is as good as `http://127.0.0.1:9090`: people type addresses.
        let base = if base.contains("://") {
            base
        } else {
            format!("http://{base}")
        };
        Client {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent: ureq::Agent::new_with_config(config),
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET /healthz`: `Ok` if the API answers `ok`.
    pub fn health(&self) -> Result<(), ClientError> {
        let text = self.text("/healthz")?;
        if text.trim() == "ok" {
            Ok(())
        } else {
            Err(ClientError::Protocol {
                url: self.url("/healthz"),
                reason: format!("expected `ok`, got `{}`", text.trim()),
            })
        }
    }

    /// `GET /api/v1/links`, as JSON.
    pub fn links_json(&self) -> Result<serde_json::Value, ClientError> {
        self.json("GET", "/api/v1/links", Body::None)
    }

    /// `GET /api/v1/links`.
    pub fn links(&self) -> Result<Vec<LinkViewJson>, ClientError> {
        #[derive(Deserialize)]
        struct Links {
            links: Vec<LinkViewJson>,
        }
        Ok(self
            .json::<Links>("GET", "/api/v1/links", Body::None)?
            .links)
    }

    /// `GET /api/v1/links/{name}`.
    pub fn link(&self, name: &str) -> Result<LinkViewJson, ClientError> {
        self.json("GET", &link_path(name), Body::None)
    }

    /// `PUT /api/v1/links/{name}` with the given text specs; returns the link's new state.
    pub fn set_link(
        &self,
        name: &str,
        both: Option<&str>,
        a_to_b: Option<&str>,
        b_to_a: Option<&str>,
    ) -> Result<LinkViewJson, ClientError> {
        let mut body = serde_json::Map::new();
        for (k, v) in [("both", both), ("a_to_b", a_to_b), ("b_to_a", b_to_a)] {
            if let Some(v) = v {
                body.insert(k.into(), json!(v));
            }
        }
        self.json(
            "PUT",
            &link_path(name),
            Body::Json(serde_json::Value::Object(body)),
        )
    }

    /// `GET /api/v1/wanopt/stats` as the JSON the API sent (a 404 [`ClientError::Api`] when
    /// no WAN optimizer runs).
    pub fn wanopt_stats_json(&self) -> Result<serde_json::Value, ClientError> {
        self.json("GET", "/api/v1/wanopt/stats", Body::None)
    }

    /// `GET /api/v1/wanopt/stats`.
    pub fn wanopt_stats(&self) -> Result<WanoptStats, ClientError> {
        self.json("GET", "/api/v1/wanopt/stats", Body::None)
    }

    /// `GET /api/v1/wanopt/flows`, as JSON.
    pub fn wanopt_flows_json(&self) -> Result<serde_json::Value, ClientError> {
        self.json("GET", "/api/v1/wanopt/flows", Body::None)
    }

    /// `GET /api/v1/wanopt/flows`.
    pub fn wanopt_flows(&self) -> Result<Vec<crate::wanopt::WanoptFlow>, ClientError> {
        self.json("GET", "/api/v1/wanopt/flows", Body::None)
    }

    /// `GET /api/v1/adc`.
    pub fn adc(&self) -> Result<AdcSnapshot, ClientError> {
        self.json("GET", "/api/v1/adc", Body::None)
    }

    /// `GET /api/v1/certificates`.
    pub fn certificates(&self) -> Result<Vec<CertificateSnapshot>, ClientError> {
        self.json("GET", "/api/v1/certificates", Body::None)
    }

    /// `GET /api/v1/certificates` as the JSON the API sent.
    pub fn certificates_json(&self) -> Result<serde_json::Value, ClientError> {
        self.json("GET", "/api/v1/certificates", Body::None)
    }

    /// `GET /api/v1/adc` as the JSON the API sent.
    pub fn adc_json(&self) -> Result<serde_json::Value, ClientError> {
        self.json("GET", "/api/v1/adc", Body::None)
    }

    /// `PUT /api/v1/adc/groups/{group}/servers/{server}`: a state, a weight, or both.
    pub fn set_server(
        &self,
        group: &str,
        server: &str,
        change: &crate::adc::SetServerRequest,
    ) -> Result<ServerSnapshot, ClientError> {
        self.json(
            "PUT",
            &format!(
                "/api/v1/adc/groups/{}/servers/{}",
                encode(group),
                encode(server)
            ),
            Body::Json(json!(change)),
        )
    }

    /// `POST /api/v1/adc/groups/{group}/servers`: a server added to the running config.
    pub fn add_server(
        &self,
        group: &str,
        server: &crate::adc::AddServerRequest,
    ) -> Result<crate::adc::ReloadReport, ClientError> {
        self.json(
            "POST",
            &format!("/api/v1/adc/groups/{}/servers", encode(group)),
            Body::Json(json!(server)),
        )
    }

    /// `DELETE /api/v1/adc/groups/{group}/servers/{server}`.
    pub fn remove_server(
        &self,
        group: &str,
        server: &str,
    ) -> Result<crate::adc::ReloadReport, ClientError> {
        self.json(
            "DELETE",
            &format!(
                "/api/v1/adc/groups/{}/servers/{}",
                encode(group),
                encode(server)
            ),
            Body::None,
        )
    }

    /// [`Client::set_server`] with a state: `enabled`, `disabled`, `draining`.
    pub fn set_server_state(
        &self,
        group: &str,
        server: &str,
        state: &str,
    ) -> Result<ServerSnapshot, ClientError> {
        let change = crate::adc::SetServerRequest {
            state: Some(state.into()),
            weight: None,
        };
        self.set_server(group, server, &change)
    }

    /// [`Client::set_server`] with a weight (0–1000).
    pub fn set_server_weight(
        &self,
        group: &str,
        server: &str,
        weight: u32,
    ) -> Result<ServerSnapshot, ClientError> {
        let change = crate::adc::SetServerRequest {
            state: None,
            weight: Some(weight),
        };
        self.set_server(group, server, &change)
    }

    /// `GET /api/v1/cache`: the integrated cache's groups and counters.
    pub fn cache(&self) -> Result<crate::cache::CacheSnapshot, ClientError> {
        self.json("GET", "/api/v1/cache", Body::None)
    }

    /// `GET /api/v1/cache` as the JSON the API sent.
    pub fn cache_json(&self) -> Result<serde_json::Value, ClientError> {
        self.json("GET", "/api/v1/cache", Body::None)
    }

    /// `POST /api/v1/cache/purge?…`: removes what the query names, at once.
    pub fn purge_cache(
        &self,
        query: &crate::cache::PurgeQuery,
    ) -> Result<crate::cache::PurgeReport, ClientError> {
        self.json(
            "POST",
            &format!("/api/v1/cache/purge?{}", query.to_query()),
            Body::None,
        )
    }

    /// `GET /api/v1/config`: the running config file's text.
    pub fn config_text(&self) -> Result<String, ClientError> {
        self.text("/api/v1/config")
    }

    /// `PUT /api/v1/config`: validates and applies a whole config file.
    pub fn replace_config(&self, text: String) -> Result<ReloadReport, ClientError> {
        self.json("PUT", "/api/v1/config", Body::Text(text))
    }

    /// `POST /api/v1/config/reload`: the instance reads its config file again.
    pub fn reload_config(&self) -> Result<ReloadReport, ClientError> {
        self.json("POST", "/api/v1/config/reload", Body::None)
    }

    /// `GET /metrics`: the OpenMetrics text.
    pub fn metrics_text(&self) -> Result<String, ClientError> {
        self.text("/metrics")
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a request and returns the status and body text, mapping transport errors.
    fn call(&self, method: &str, path: &str, body: Body) -> Result<(u16, String), ClientError> {
        let url = self.url(path);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let with_body = |mut r: ureq::RequestBuilder<ureq::typestate::WithBody>| {
            if let Some(a) = &auth {
                r = r.header("authorization", a);
            }
            r
        };
        let result = match (method, body) {
            ("PUT", Body::Json(body)) => with_body(self.agent.put(&url)).send_json(body),
            ("PUT", Body::Text(text)) => with_body(self.agent.put(&url))
                .header("content-type", "application/toml")
                .send(text.as_bytes()),
            ("POST", Body::Json(body)) => with_body(self.agent.post(&url)).send_json(body),
            ("POST", _) => with_body(self.agent.post(&url)).send_empty(),
            (method, _) => {
                let mut r = if method == "DELETE" {
                    self.agent.delete(&url)
                } else {
                    self.agent.get(&url)
                };
                if let Some(a) = &auth {
                    r = r.header("authorization", a);
                }
                r.call()
            }
        };
        let mut resp = result.map_err(|e| self.transport_error(&url, e))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| ClientError::Protocol {
                url: url.clone(),
                reason: format!("cannot read the body: {e}"),
            })?;
        if status == 401 {
            return Err(ClientError::Unauthorized {
                url: self.base.clone(),
                message: error_message(&text),
            });
        }
        if !(200..300).contains(&status) {
            return Err(ClientError::Api {
                status,
                message: error_message(&text),
            });
        }
        Ok((status, text))
    }

    fn text(&self, path: &str) -> Result<String, ClientError> {
        self.call("GET", path, Body::None).map(|(_, t)| t)
    }

    fn json<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Body,
    ) -> Result<T, ClientError> {
        let (_, text) = self.call(method, path, body)?;
        serde_json::from_str(&text).map_err(|e| ClientError::Protocol {
            url: self.url(path),
            reason: format!("not the JSON the admin API sends: {e}"),
        })
    }

    fn transport_error(&self, url: &str, e: ureq::Error) -> ClientError {
        let reason = match &e {
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
                std::io::ErrorKind::TimedOut => "timed out".to_string(),
                _ => io.to_string(),
            },
            ureq::Error::HostNotFound => "host not found".to_string(),
            ureq::Error::ConnectionFailed => "connection failed".to_string(),
            ureq::Error::Timeout(t) => format!("timed out ({t})"),
            ureq::Error::BadUri(u) => {
                return ClientError::Protocol {
                    url: url.to_string(),
                    reason: format!("`{u}` is not a usable URL: write e.g. http://127.0.0.1:9090"),
                }
            }
            other => {
                return ClientError::Protocol {
                    url: url.to_string(),
                    reason: other.to_string(),
                }
            }
        };
        ClientError::Unreachable {
            url: self.base.clone(),
            reason,
        }
    }
}

/// The API's `{"error": "…"}` message, or the body itself if it is not one.
fn error_message(text: &str) -> String {
    #[derive(Deserialize)]
    struct ApiError {
        error: String,
    }
    serde_json::from_str::<ApiError>(text)
        .map(|e| e.error)
        .unwrap_or_else(|_| text.trim().to_string())
}

/// `/api/v1/links/{name}` with `name` percent-encoded.
fn link_path(name: &str) -> String {
    format!("/api/v1/links/{}", encode(name))
}

/// A path segment, percent-encoded.
fn encode(segment: &str) -> String {
    let mut p = String::new();
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            p.push(char::from(b));
        } else {
            p.push_str(&format!("%{b:02X}"));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_are_percent_encoded() {
        assert_eq!(link_path("wan-1.a_b"), "/api/v1/links/wan-1.a_b");
        assert_eq!(link_path("a b/c"), "/api/v1/links/a%20b%2Fc");
    }

    #[test]
    fn a_bare_address_gets_the_http_scheme() {
        assert_eq!(
            Client::new("127.0.0.1:9190", None).base,
            "http://127.0.0.1:9190"
        );
        assert_eq!(Client::new("https://h:1/", None).base, "https://h:1");
    }

    #[test]
    fn api_error_messages_are_unwrapped() {
        assert_eq!(error_message(r#"{"error": "no link"}"#), "no link");
        assert_eq!(error_message("plain\n"), "plain");
    }
}
