//! Which content group a request (and its response) belongs to: the `[[cache.policy]]` list,
//! first match wins, as NetScaler's `bind cache global … -priority`.
//!
//! Pure: [`Policies::plan`] reads the request's method, host, path and headers and returns a
//! [`Plan`]; [`Plan::decide`] finishes it with the response's `Content-Type`. A policy with a
//! `content_type` condition cannot be decided on the request alone, so the plan keeps the
//! candidates in order up to the first policy that can; the lookup tries each candidate's
//! group (an object may only be in one of them), and the response picks the group it is stored
//! in.

use headway_config::adc::Condition;
use headway_config::cache::{Action, CacheConfig, Policy};
use http::request::Parts;
use smallvec::SmallVec;

use crate::http::route;

/// The compiled policies of one config generation.
#[derive(Debug)]
pub struct Policies {
    policies: Vec<Policy>,
    default: Action,
    /// Whether any condition reads the host (only then is it computed per request).
    needs_host: bool,
}

/// What the request alone says: candidates decided by the response, then the action taken
/// when none of them matches the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Policies that matched the request and wait for the response's content type, in order:
    /// (index into the policies, action).
    pub pending: SmallVec<[(usize, Action); 2]>,
    /// The action of the first policy decided by the request (or the default).
    pub last: Action,
}

impl Plan {
    /// Whether nothing can be cached: every action is `Bypass`.
    pub fn is_bypass(&self) -> bool {
        self.last == Action::Bypass && self.pending.iter().all(|(_, a)| *a == Action::Bypass)
    }

    /// The groups a stored object of this request may be in, in order, without repeats.
    pub fn groups(&self) -> SmallVec<[usize; 2]> {
        let mut out = SmallVec::new();
        for a in self.pending.iter().map(|(_, a)| *a).chain([self.last]) {
            if let Action::Cache(g) = a {
                if !out.contains(&g) {
                    out.push(g);
                }
            }
        }
        out
    }

    /// The action for a response with `content_type` (the field's value, if any).
    pub fn decide(&self, policies: &Policies, content_type: Option<&[u8]>) -> Action {
        if self.pending.is_empty() {
            return self.last;
        }
        let ct = content_type
            .map(|v| {
                let v = v.split(|b| *b == b';').next().unwrap_or_default();
                v.trim_ascii().to_ascii_lowercase()
            })
            .unwrap_or_default();
        for (i, action) in &self.pending {
            let types = &policies.policies[*i].content_types;
            if types.iter().any(|t| ct.starts_with(t.as_bytes())) {
                return *action;
            }
        }
        self.last
    }
}

impl Policies {
    /// Compiles a config's policies.
    pub fn new(config: &CacheConfig) -> Self {
        let needs_host = config.policies.iter().any(|p| {
            p.conditions
                .iter()
                .any(|c| matches!(c, Condition::Host(_) | Condition::HostSuffix(_)))
        });
        Policies {
            policies: config.policies.clone(),
            default: config.default_group.map_or(Action::Bypass, Action::Cache),
            needs_host,
        }
    }

    /// The plan for a request.
    pub fn plan(&self, req: &Parts) -> Plan {
        let mut pending = SmallVec::new();
        if self.policies.is_empty() {
            return Plan {
                pending,
                last: self.default,
            };
        }
        let host = if self.needs_host {
            route::host_of(req)
        } else {
            None
        };
        let path = req.uri.path();
        for (i, p) in self.policies.iter().enumerate() {
            if !p
                .conditions
                .iter()
                .all(|c| route::matches(c, req, host.as_deref(), path, None))
            {
                continue;
            }
            if p.content_types.is_empty() {
                return Plan {
                    pending,
                    last: p.action,
                };
            }
            pending.push((i, p.action));
        }
        Plan {
            pending,
            last: self.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> CacheConfig {
        let base = "[[server_group]]\nname = \"web\"\n[[server_group.server]]\naddress = \
                    \"127.0.0.1:8080\"\n[[virtual_server]]\nname = \"f\"\nkind = \"http\"\n\
                    listen = \"127.0.0.1:8000\"\ngroup = \"web\"\n";
        headway_config::Config::parse(&format!("{base}{text}"), "t.toml")
            .unwrap()
            .adc
            .cache
            .unwrap()
    }

    fn req(method: &str, uri: &str, host: &str) -> Parts {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", host)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn first_match_wins_and_content_types_wait_for_the_response() {
        let c = config(
            r#"
[cache]
default_group = "rest"
[[cache.group]]
name = "images"
[[cache.group]]
name = "js"
[[cache.group]]
name = "rest"
[[cache.policy]]
host = "*.private.example"
action = "bypass"
[[cache.policy]]
path_extension = ["jpg", "gif"]
group = "images"
[[cache.policy]]
content_type = ["application/x-javascript", "text/javascript"]
group = "js"
[[cache.policy]]
path_prefix = "/api/"
action = "bypass"
"#,
        );
        let p = Policies::new(&c);
        let plan = p.plan(&req("GET", "/a/b.JPG?x", "www.example"));
        assert_eq!(plan.last, Action::Cache(0));
        assert!(plan.pending.is_empty());
        assert_eq!(plan.groups().as_slice(), &[0]);

        let plan = p.plan(&req("GET", "/a.jpg", "x.private.example:8080"));
        assert!(plan.is_bypass());
        assert!(plan.groups().is_empty());

        // /api/ waits for the content type: JavaScript is cached, the rest bypassed.
        let plan = p.plan(&req("GET", "/api/x", "www.example"));
        assert_eq!(plan.groups().as_slice(), &[1]);
        assert!(!plan.is_bypass());
        assert_eq!(
            plan.decide(&p, Some(b"Text/JavaScript; charset=utf-8")),
            Action::Cache(1)
        );
        assert_eq!(plan.decide(&p, Some(b"application/json")), Action::Bypass);
        assert_eq!(plan.decide(&p, None), Action::Bypass);

        // Nothing decided by the request: the default group.
        let plan = p.plan(&req("GET", "/index.html", "www.example"));
        assert_eq!(plan.groups().as_slice(), &[1, 2]);
        assert_eq!(plan.decide(&p, Some(b"text/html")), Action::Cache(2));
    }

    #[test]
    fn without_a_default_unmatched_requests_bypass() {
        let c = config(
            "[cache]\n[[cache.group]]\nname = \"a\"\n[[cache.policy]]\npath_prefix = \
             \"/static/\"\nmethod = [\"GET\", \"HEAD\"]\ngroup = \"a\"\n",
        );
        let p = Policies::new(&c);
        assert_eq!(p.plan(&req("GET", "/static/x", "h")).last, Action::Cache(0));
        assert_eq!(
            p.plan(&req("HEAD", "/static/x", "h")).last,
            Action::Cache(0)
        );
        assert!(p.plan(&req("POST", "/static/x", "h")).is_bypass());
        assert!(p.plan(&req("GET", "/x", "h")).is_bypass());
    }
}
