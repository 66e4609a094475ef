//! HTTP basic authentication on content-switching rules (a rule's `auth`).
//!
//! [`credentials`] reads a request's `Authorization: Basic …` field (pure). An
//! [`Authenticator`] checks them against the users file's bcrypt hashes: off the event loop
//! (bcrypt takes milliseconds by design), at most [`CHECKS_AT_ONCE`] at a time so that a flood
//! of wrong passwords cannot take every blocking thread, and remembering for [`REMEMBER`] the
//! credentials that passed (as a BLAKE3 digest of the password and the user's bcrypt hash,
//! never in clear), so that a browser's every request does not pay a bcrypt check. A name that
//! is not a user is checked against a dummy hash all the same: the answer takes as long as for
//! a wrong password, so names cannot be probed by timing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use headway_config::adc::auth::BasicAuth;
use http::{HeaderMap, HeaderValue};
use parking_lot::Mutex;

/// How long credentials that passed are taken without a new bcrypt check.
pub const REMEMBER: Duration = Duration::from_secs(600);
/// Most credentials remembered at once per rule (beyond: forgotten all, checked again).
pub const REMEMBERED_MAX: usize = 10_000;
/// Most bcrypt checks running at once per rule.
pub const CHECKS_AT_ONCE: usize = 2;
/// Longest `Authorization` value read (a user name and password of a few hundred bytes).
const MAX_FIELD: usize = 4096;

/// A rule's users and the credentials that passed lately.
#[derive(Debug)]
pub struct Authenticator {
    /// What it was made from.
    config: BasicAuth,
    users: HashMap<String, String>,
    /// A bcrypt hash of the same cost as the users', checked for names that are not users.
    dummy: String,
    challenge: HeaderValue,
    remembered: Mutex<HashMap<[u8; 32], Instant>>,
    checks: tokio::sync::Semaphore,
}

impl Authenticator {
    /// An authenticator of `auth`'s users.
    pub fn new(auth: &BasicAuth) -> Self {
        let users: HashMap<String, String> = auth.users.iter().cloned().collect();
        // The first user's hash with another salt: the same cost, matching no password
        // anyone knows.
        let dummy = auth.users.first().map_or_else(String::new, |(_, h)| {
            let (head, _) = h.split_at(7);
            format!("{head}{}", "e".repeat(53))
        });
        let challenge = HeaderValue::from_str(&format!(
            "Basic realm=\"{}\", charset=\"UTF-8\"",
            auth.realm
        ))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic realm=\"restricted\""));
        Authenticator {
            config: auth.clone(),
            users,
            dummy,
            challenge,
            remembered: Mutex::new(HashMap::new()),
            checks: tokio::sync::Semaphore::new(CHECKS_AT_ONCE),
        }
    }

    /// What it was made from.
    pub fn config(&self) -> &BasicAuth {
        &self.config
    }

    /// The `WWW-Authenticate` value of a 401.
    pub fn challenge(&self) -> HeaderValue {
        self.challenge.clone()
    }

    /// Whether `headers` carry the name and password of a user, at `now`.
    pub async fn admits(&self, headers: &HeaderMap, now: Instant) -> bool {
        let Some((user, password)) = credentials(headers) else {
            return false;
        };
        let known = self.users.get(&user);
        let hash = known.unwrap_or(&self.dummy).clone();
        let digest = *blake3::Hasher::new()
            .update(hash.as_bytes())
            .update(&[0])
            .update(password.as_bytes())
            .finalize()
            .as_bytes();
        if known.is_some() {
            let fresh = self
                .remembered
                .lock()
                .get(&digest)
                .is_some_and(|at| now.saturating_duration_since(*at) < REMEMBER);
            if fresh {
                return true;
            }
        }
        let Ok(_permit) = self.checks.acquire().await else {
            return false;
        };
        let verified = tokio::task::spawn_blocking(move || {
            bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        let ok = verified && known.is_some();
        if ok {
            let mut r = self.remembered.lock();
            if r.len() >= REMEMBERED_MAX {
                r.clear();
            }
            r.insert(digest, now);
        }
        ok
    }
}

/// The user name and password of an `Authorization: Basic …` field (RFC 7617: base64 of
/// `name:password`, UTF-8), if the request has one that decodes.
pub fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(http::header::AUTHORIZATION)?.as_bytes();
    if value.len() > MAX_FIELD {
        return None;
    }
    let (scheme, rest) = value.split_at(value.iter().position(|b| *b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests;
