//! The admin HTTP server (axum on hyper).
//!
//! Owns the routes (see the crate docs), the bearer-token check, the request body limit, the
//! JSON error format and the admin API's own request counter. It does not own the links or the
//! other metrics: those come in through [`AdminState::new`] (or [`AdminState::with_wanopt`]) as
//! a [`LinkControl`], an optional [`WanoptControl`] and a registry.
//!
//! Layers, outermost first: request counting (so 401s are counted too), token check, body
//! limit, then the route. `PUT` is validate-then-apply: both directions' new parameters are
//! built and validated before [`LinkControl::set`] is called once.

use std::future::Future;
use std::io;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use headway_config::LinkSpec;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::adc::{AdcCollector, AdcControl, AddServerRequest, ReloadReport, SetServerRequest};
use crate::control::{LinkControl, LinkViewJson, SetLinkRequest};
use crate::wanopt::{WanoptCollector, WanoptControl};

/// The largest config file accepted by `PUT /api/v1/config`, in bytes.
pub const CONFIG_LIMIT: usize = 1 << 20;

/// The largest request body accepted, in bytes; larger bodies get 413.
pub const BODY_LIMIT: usize = 64 * 1024;

/// The content type of `GET /metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Everything the admin routes need; cheap to clone.
#[derive(Clone)]
pub struct AdminState {
    control: Arc<dyn LinkControl>,
    wanopt: Option<Arc<dyn WanoptControl>>,
    adc: Option<Arc<dyn AdcControl>>,
    registry: Arc<Registry>,
    token: Option<Arc<str>>,
    requests: Family<RequestLabels, Counter>,
    /// Serialises `PUT`s so that their read-modify-write sequences do not interleave.
    put_lock: Arc<parking_lot::Mutex<()>>,
}

/// Labels of the admin API's request counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// The route template (`/api/v1/links/{name}`), or `unmatched`.
    route: String,
    /// The HTTP method.
    method: String,
    /// The response status code.
    status: u16,
}

impl AdminState {
    /// State for the admin routes. Registers the admin API's own metric
    /// (`admin_requests_total{route, method, status}`, under the registry's prefix) in
    /// `registry`; the registry is read-only from then on. `token`, when set, is required on
    /// every route except `/healthz`.
    pub fn new(control: Arc<dyn LinkControl>, registry: Registry, token: Option<String>) -> Self {
        AdminState::with_wanopt(control, None, registry, token)
    }

    /// Like [`AdminState::new`], with a WAN-optimizer appliance when `wanopt` is given: serves
    /// its counters at `/api/v1/wanopt/stats` and registers a [`WanoptCollector`] in `registry`
    /// (`wanopt_*` metrics). Without one, the wanopt route answers 404.
    pub fn with_wanopt(
        control: Arc<dyn LinkControl>,
        wanopt: Option<Arc<dyn WanoptControl>>,
        registry: Registry,
        token: Option<String>,
    ) -> Self {
        AdminState::with_roles(control, wanopt, None, registry, token)
    }

    /// Like [`AdminState::with_wanopt`], with an ADC when `adc` is given: serves its state and
    /// counters at `/api/v1/adc`, server state changes, the config routes, and registers an
    /// [`AdcCollector`] (`adc_*` metrics). Without one, those routes answer 404.
    pub fn with_roles(
        control: Arc<dyn LinkControl>,
        wanopt: Option<Arc<dyn WanoptControl>>,
        adc: Option<Arc<dyn AdcControl>>,
        mut registry: Registry,
        token: Option<String>,
    ) -> Self {
        if let Some(w) = &wanopt {
            registry.register_collector(Box::new(WanoptCollector::new(w.clone())));
        }
        if let Some(a) = &adc {
            registry.register_collector(Box::new(AdcCollector::new(a.clone())));
        }
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admin_requests",
            "Admin API requests by route, method and response status",
            requests.clone(),
        );
        AdminState {
            control,
            wanopt,
            adc,
            registry: Arc::new(registry),
            token: token.map(Arc::from),
            requests,
            put_lock: Arc::new(parking_lot::Mutex::new(())),
        }
    }
}

/// Serves the admin API on `listener` until `shutdown` resolves, then lets in-flight requests
/// finish and returns.
///
/// Errors only if accepting fails fatally. Not cancel-safe in the sense that dropping the
/// future stops accepting but connections already accepted may finish on their own tasks; use
/// `shutdown` to stop cleanly.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The admin routes as an axum [`Router`], for embedding in another server.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/links", get(list_links))
        .route("/api/v1/links/{name}", get(show_link).put(set_link))
        .route("/api/v1/wanopt/stats", get(wanopt_stats))
        .route("/api/v1/wanopt/flows", get(wanopt_flows))
        .route("/wanopt/stats", get(wanopt_stats))
        .route("/api/v1/adc", get(adc_snapshot))
        .route("/api/v1/certificates", get(certificates))
        .route("/api/v1/cache", get(cache_snapshot))
        .route("/api/v1/cache/purge", axum::routing::post(cache_purge))
        .route(
            "/api/v1/adc/groups/{group}/servers",
            axum::routing::post(adc_add_server),
        )
        .route(
            "/api/v1/adc/groups/{group}/servers/{server}",
            get(adc_server)
                .put(adc_set_server)
                .delete(adc_remove_server),
        )
        .route(
            "/api/v1/config",
            get(config_text)
                .put(config_replace)
                .layer(DefaultBodyLimit::max(CONFIG_LIMIT)),
        )
        .route("/api/v1/config/reload", axum::routing::post(config_reload))
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

/// A JSON error response.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        tracing::error!(error = %e, "cannot encode metrics");
        return error(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics");
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
        )],
        text,
    )
        .into_response()
}

async fn list_links(State(state): State<AdminState>) -> Response {
    let links: Vec<LinkViewJson> = state
        .control
        .names()
        .iter()
        .filter_map(|n| state.control.get(n))
        .map(|v| LinkViewJson::from(&v))
        .collect();
    Json(json!({ "links": links })).into_response()
}

fn unknown_link(state: &AdminState, name: &str) -> Response {
    let names = state.control.names();
    let known = if names.is_empty() {
        "there are no links".to_string()
    } else {
        format!("links: {}", names.join(", "))
    };
    error(
        StatusCode::NOT_FOUND,
        format!("no link named `{name}`; {known}"),
    )
}

async fn show_link(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    match state.control.get(&name) {
        Some(v) => Json(LinkViewJson::from(&v)).into_response(),
        None => unknown_link(&state, &name),
    }
}

async fn set_link(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {BODY_LIMIT} bytes"),
            )
        }
        Err(e) => return error(e.status(), e.body_text()),
    };
    let req: SetLinkRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body is not a valid request: {e}; send a JSON object such as \
                     {{\"both\": \"delay=20ms loss=1%\"}} with any of `both`, `a_to_b`, `b_to_a`"
                ),
            )
        }
    };
    if req.both.is_none() && req.a_to_b.is_none() && req.b_to_a.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "nothing to change: give at least one of `both`, `a_to_b`, `b_to_a`",
        );
    }
    let both = req.both.map(|s| s.0).unwrap_or_default();
    let dir = |own: Option<headway_config::LinkSpecInput>| -> Option<LinkSpec> {
        let merged = both.merged(&own.map(|s| s.0).unwrap_or_default());
        (!merged.is_empty()).then_some(merged)
    };
    let (a_spec, b_spec) = (dir(req.a_to_b), dir(req.b_to_a));

    let _serialised = state.put_lock.lock();
    let Some(view) = state.control.get(&name) else {
        return unknown_link(&state, &name);
    };
    let apply = |label: &str, spec: &Option<LinkSpec>, current| match spec {
        None => Ok(None),
        Some(s) => s
            .apply(current)
            .map(Some)
            .map_err(|e| format!("{label}: {e}")),
    };
    // Validate everything before applying anything.
    let (a_to_b, b_to_a) = match (
        apply("a_to_b", &a_spec, &view.a_to_b),
        apply("b_to_a", &b_spec, &view.b_to_a),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return error(StatusCode::BAD_REQUEST, e),
    };
    if let Err(e) = state.control.set(&name, a_to_b, b_to_a) {
        tracing::warn!(link = %name, error = %e, "link refused new parameters");
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("link `{name}` refused the change: {e}"),
        );
    }
    match state.control.get(&name) {
        Some(v) => {
            tracing::info!(
                link = %name,
                a_to_b = %LinkSpec::from(&v.a_to_b),
                b_to_a = %LinkSpec::from(&v.b_to_a),
                "link parameters changed"
            );
            Json(LinkViewJson::from(&v)).into_response()
        }
        None => unknown_link(&state, &name),
    }
}

async fn wanopt_stats(State(state): State<AdminState>) -> Response {
    match &state.wanopt {
        Some(w) => Json(w.stats()).into_response(),
        None => no_wanopt(),
    }
}

async fn wanopt_flows(State(state): State<AdminState>) -> Response {
    match &state.wanopt {
        Some(w) => Json(w.flows()).into_response(),
        None => no_wanopt(),
    }
}

fn no_wanopt() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no WAN optimizer runs in this instance: add a [wanopt] section to its config file and \
         restart `headway run`",
    )
}

fn no_adc() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no ADC runs in this instance: add [[virtual_server]] and [[server_group]] sections to \
         its config file and restart `headway run`",
    )
}

async fn adc_snapshot(State(state): State<AdminState>) -> Response {
    match &state.adc {
        Some(a) => Json(a.snapshot()).into_response(),
        None => no_adc(),
    }
}

async fn certificates(State(state): State<AdminState>) -> Response {
    match &state.adc {
        Some(a) => Json(a.snapshot().certificates).into_response(),
        None => no_adc(),
    }
}

async fn cache_snapshot(State(state): State<AdminState>) -> Response {
    match state.adc.as_ref().map(|a| a.snapshot().cache) {
        Some(Some(c)) => Json(c).into_response(),
        Some(None) => error(
            StatusCode::NOT_FOUND,
            "no cache is configured: add a [cache] section",
        ),
        None => no_adc(),
    }
}

async fn cache_purge(
    State(state): State<AdminState>,
    query: Result<
        axum::extract::Query<crate::cache::PurgeQuery>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Response {
    let Some(adc) = &state.adc else {
        return no_adc();
    };
    let purge = match query.map_err(|e| e.body_text()).and_then(|q| q.purge()) {
        Ok(p) => p,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    match adc.purge_cache(purge) {
        Ok(r) => Json(r).into_response(),
        Err((true, m)) => error(StatusCode::NOT_FOUND, m),
        Err((false, m)) => error(StatusCode::BAD_REQUEST, m),
    }
}

fn find_server(
    adc: &dyn AdcControl,
    group: &str,
    server: &str,
) -> Result<crate::adc::ServerSnapshot, Box<Response>> {
    let s = adc.snapshot();
    let Some(g) = s.groups.iter().find(|g| g.name == group) else {
        let known: Vec<&str> = s.groups.iter().map(|g| g.name.as_str()).collect();
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            format!("no server group `{group}`; groups: {}", known.join(", ")),
        )));
    };
    g.servers
        .iter()
        .find(|v| v.name == server)
        .cloned()
        .ok_or_else(|| {
            let known: Vec<&str> = g.servers.iter().map(|v| v.name.as_str()).collect();
            Box::new(error(
                StatusCode::NOT_FOUND,
                format!(
                    "group `{group}` has no server `{server}`; servers: {}",
                    known.join(", ")
                ),
            ))
        })
}

async fn adc_server(
    State(state): State<AdminState>,
    Path((group, server)): Path<(String, String)>,
) -> Response {
    let Some(adc) = &state.adc else {
        return no_adc();
    };
    match find_server(adc.as_ref(), &group, &server) {
        Ok(s) => Json(s).into_response(),
        Err(r) => *r,
    }
}

async fn adc_add_server(
    State(state): State<AdminState>,
    Path(group): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (adc, body) = match adc_and_body(&state, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let req: AddServerRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body is not a valid server: {e}; send {{\"name\": \"s3\", \
                     \"address\": \"10.0.0.7:8080\"}} (and optionally \"weight\": 2, \
                     \"backup\": true)"
                ),
            )
        }
    };
    changed(adc.add_server(group, req).await)
}

async fn adc_remove_server(
    State(state): State<AdminState>,
    Path((group, server)): Path<(String, String)>,
) -> Response {
    let Some(adc) = state.adc.clone() else {
        return no_adc();
    };
    changed(adc.remove_server(group, server).await)
}

/// The ADC and a request's body, or the answer when there is no ADC or no readable body.
fn adc_and_body(
    state: &AdminState,
    body: Result<Bytes, BytesRejection>,
) -> Result<(Arc<dyn AdcControl>, Bytes), Box<Response>> {
    let Some(adc) = state.adc.clone() else {
        return Err(Box::new(no_adc()));
    };
    match body {
        Ok(b) => Ok((adc, b)),
        Err(e) => Err(Box::new(error(e.status(), e.body_text()))),
    }
}

/// The answer to a server added or removed: the new generation, or why not.
fn changed(r: Result<ReloadReport, (bool, String)>) -> Response {
    match r {
        Ok(r) => Json(r).into_response(),
        Err((true, m)) => error(StatusCode::NOT_FOUND, m),
        Err((false, m)) => error(StatusCode::BAD_REQUEST, m),
    }
}

async fn adc_set_server(
    State(state): State<AdminState>,
    Path((group, server)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (adc, body) = match adc_and_body(&state, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let usage = "send {\"state\": \"draining\"} with `enabled`, `disabled` or `draining`, \
                 {\"weight\": 5} with 0 to 1000, or both";
    let req: SetServerRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not a valid request: {e}; {usage}"),
            )
        }
    };
    if req.state.is_none() && req.weight.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            format!("the request changes nothing; {usage}"),
        );
    }
    // The server is looked up first, so that a request naming no server changes nothing;
    // a weight out of range is refused before the state is set.
    if let Err(r) = find_server(adc.as_ref(), &group, &server) {
        return *r;
    }
    if let Some(w) = req.weight.filter(|w| *w > headway_config::adc::MAX_WEIGHT) {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "weight {w} is out of range: use 0 to {}",
                headway_config::adc::MAX_WEIGHT
            ),
        );
    }
    let done = req
        .state
        .as_deref()
        .map_or(Ok(()), |st| adc.set_server_state(&group, &server, st))
        .and_then(|()| {
            req.weight
                .map_or(Ok(()), |w| adc.set_server_weight(&group, &server, w))
        });
    match done {
        Ok(()) => match find_server(adc.as_ref(), &group, &server) {
            Ok(s) => Json(s).into_response(),
            Err(r) => *r,
        },
        Err((true, m)) => error(StatusCode::NOT_FOUND, m),
        Err((false, m)) => error(StatusCode::BAD_REQUEST, m),
    }
}

async fn config_text(State(state): State<AdminState>) -> Response {
    match &state.adc {
        Some(a) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/toml; charset=utf-8"),
            )],
            a.config_text(),
        )
            .into_response(),
        None => no_adc(),
    }
}

async fn config_replace(
    State(state): State<AdminState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(adc) = state.adc.clone() else {
        return no_adc();
    };
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the config is larger than {CONFIG_LIMIT} bytes"),
            )
        }
        Err(e) => return error(e.status(), e.body_text()),
    };
    let Ok(text) = String::from_utf8(body.to_vec()) else {
        return error(StatusCode::BAD_REQUEST, "the config is not UTF-8 text");
    };
    match adc.replace_config(text).await {
        Ok(r) => Json(r).into_response(),
        Err(m) => error(StatusCode::BAD_REQUEST, m),
    }
}

async fn config_reload(State(state): State<AdminState>) -> Response {
    let Some(adc) = state.adc.clone() else {
        return no_adc();
    };
    match adc.reload().await {
        Ok(r) => Json(r).into_response(),
        Err(m) => error(StatusCode::BAD_REQUEST, m),
    }
}

async fn no_route(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no route {method} {}; routes: GET /healthz, GET /metrics, GET /api/v1/links, \
             GET|PUT /api/v1/links/{{name}}, GET /api/v1/wanopt/stats, GET /api/v1/wanopt/flows, GET /api/v1/adc, \
             GET /api/v1/certificates, POST /api/v1/adc/groups/{{group}}/servers, GET|PUT|DELETE /api/v1/adc/groups/{{group}}/servers/{{server}}, GET|PUT /api/v1/config, \
             POST /api/v1/config/reload, GET /api/v1/cache, POST /api/v1/cache/purge?url=|prefix=|group=|all=true[&host=]",
            uri.path()
        ),
    )
}

async fn no_method(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Requires `Authorization: Bearer <token>` on every route but `/healthz` when a token is set.
async fn authorize(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    let Some(token) = &state.token else {
        return next.run(req).await;
    };
    if req.uri().path() == "/healthz" || bearer_matches(req.headers(), token) {
        return next.run(req).await;
    }
    let mut r = error(
        StatusCode::UNAUTHORIZED,
        "missing or wrong token: send `Authorization: Bearer <token>` (headway ctl: --token or \
         HEADWAY_TOKEN)",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
    else {
        return false;
    };
    constant_time_eq(given.as_bytes(), token.as_bytes())
}

/// Compares without an early exit, so the time taken does not reveal how much of a guessed
/// token was right. (The length is not hidden.)
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Counts every request by route template, method and status.
async fn count(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().to_string();
    let resp = next.run(req).await;
    state
        .requests
        .get_or_create(&RequestLabels {
            route,
            method,
            status: resp.status().as_u16(),
        })
        .inc();
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_content() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn bearer_header_is_parsed() {
        let mut h = HeaderMap::new();
        assert!(!bearer_matches(&h, "t"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        assert!(bearer_matches(&h, "t"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  t "),
        );
        assert!(bearer_matches(&h, "t"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic t"));
        assert!(!bearer_matches(&h, "t"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer"));
        assert!(!bearer_matches(&h, "t"));
    }
}
