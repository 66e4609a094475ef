//! A rule's rate limit (`rate_limit = { requests = 10, per = "1m", by = "client" }`): how many
//! of the requests it matches are taken, per client, per caller named in a header, or in all.
//! Pure checking here; the proxy keeps the buckets.

use std::time::Duration;

use toml::Spanned;

use crate::config::{invalid, ConfigError};
use crate::file::{Origin, RateLimitSection};

/// The most requests a limit may allow per period.
pub const MAX_REQUESTS: u32 = 1_000_000;
/// The longest period.
pub const MAX_PER: Duration = Duration::from_secs(86_400);

/// A rule's rate limit: a token bucket of `requests` tokens, refilled at `requests` per `per`,
/// one per key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests taken per `per` (also the most taken at once), 1–[`MAX_REQUESTS`].
    pub requests: u32,
    /// The period, 1 ms – [`MAX_PER`].
    pub per: Duration,
    /// Whose requests share a bucket.
    pub by: RateKey,
}

/// Whose requests share one bucket of a [`RateLimit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateKey {
    /// Each client address (IPv6 clients by their /64, the block one subscriber holds).
    Client,
    /// Every request the rule matches, together.
    All,
    /// Each value of this request header (lower-case name): an API key, a tenant; requests
    /// without it share one bucket.
    Header(String),
}

impl RateLimit {
    /// Tokens added per second.
    pub fn per_second(&self) -> f64 {
        f64::from(self.requests) / self.per.as_secs_f64()
    }
}

/// Checks a rule's `rate_limit` section; `rule` names the rule in messages.
pub(crate) fn rate_limit(
    section: &Spanned<RateLimitSection>,
    rule: &str,
    origin: &Origin,
) -> Result<RateLimit, ConfigError> {
    let s = section.get_ref();
    let requests = *s.requests.get_ref();
    if !(1..=MAX_REQUESTS).contains(&requests) {
        return Err(invalid(
            origin.locate(Some(s.requests.span())),
            format!(
                "rule `{rule}`: rate_limit requests {requests} is out of range: use 1 to \
                 {MAX_REQUESTS} (0 would refuse everything: use `respond` for that)"
            ),
        ));
    }
    let per = match &s.per {
        None => Duration::from_secs(1),
        Some(p) => {
            let d = p.get_ref().0;
            if d < Duration::from_millis(1) || d > MAX_PER {
                return Err(invalid(
                    origin.locate(Some(p.span())),
                    format!(
                        "rule `{rule}`: rate_limit per must be from \"1ms\" to \"24h\" (\"1s\", \
                         \"1m\", \"1h\")"
                    ),
                ));
            }
            d
        }
    };
    let by_text = s.by.as_ref().map(|b| b.get_ref().as_str());
    let by = match (by_text, &s.header) {
        (None | Some("client"), None) => RateKey::Client,
        (Some("all"), None) => RateKey::All,
        (Some("header"), Some(h)) => {
            let name = h.get_ref();
            if !super::is_token(name) {
                return Err(invalid(
                    origin.locate(Some(h.span())),
                    format!(
                        "rule `{rule}`: rate_limit header `{name}` is not a header name (letters, \
                         digits and `-`, such as \"X-API-Key\")"
                    ),
                ));
            }
            RateKey::Header(name.to_ascii_lowercase())
        }
        (Some("header"), None) => {
            return Err(invalid(
                origin.locate(s.by.as_ref().map(Spanned::span)),
                format!(
                    "rule `{rule}`: rate_limit by = \"header\" needs the header that names the \
                     caller: add `header = \"X-API-Key\"`"
                ),
            ))
        }
        (Some("client" | "all") | None, Some(h)) => {
            return Err(invalid(
                origin.locate(Some(h.span())),
                format!(
                    "rule `{rule}`: rate_limit header is only for by = \"header\": add it, or \
                     remove `header`"
                ),
            ))
        }
        (Some(other), _) => {
            return Err(invalid(
                origin.locate(s.by.as_ref().map(Spanned::span)),
                format!(
                    "rule `{rule}`: rate_limit by `{other}` is not known: use \"client\" (each \
                     client address), \"all\" (the rule's requests together) or \"header\" \
                     (each value of `header`)"
                ),
            ))
        }
    };
    Ok(RateLimit { requests, per, by })
}
