//! Sans-IO server selection, persistence tables and health state machines for Headway's ADC.
//!
//! The proxy (`headway-proxy`) asks this crate three questions on its per-request path — which
//! server takes this request, is this client already bound to a server, may this server take
//! traffic — and its background monitors ask a fourth: what does this check result mean.
//! Everything here is a plain, deterministic state machine or function.
//!
//! # What this crate owns and what it does not
//!
//! It owns the selection algorithms and their state, the source-IP persistence table, the
//! persistence cookie's value codec and attributes, the rise/fall health state machine, the
//! admin-state × health eligibility rule, and the HTTP monitor's response classifier.
//!
//! It does no I/O: no sockets, no tasks, no timers, no clock (time comes in as `now`), no OS
//! randomness (the selector's RNG is seeded by the caller). It does not parse HTTP beyond one
//! `Cookie` header value, does not run health checks, and does not hold the pool: the caller
//! keeps servers, counts their active connections, measures response times, and publishes
//! health snapshots.
//!
//! # Modules and entry points
//!
//! | module | entry points | per |
//! |---|---|---|
//! | [`select`] | [`Selector::new`], [`Selector::pick`] over a slice of [`Candidate`]s | pool; one pick per request |
//! | [`persist`] | [`SourceTable`] (`lookup` / `insert`); [`CookieCodec`] → [`CookieTable`] (`server` / `value`); [`CookieSpec`] (`find_in` / `set_cookie_value`) | pool; one lookup per request |
//! | [`health`] | [`HealthState::record`]; [`Eligibility::of`]; [`HttpExpect::check`] | server; one record per check |
//!
//! # Call order for one request
//!
//! ```text
//!  persisted? ── SourceTable::lookup / CookieSpec::find_in → CookieTable::server
//!      │ yes, and Eligibility::of(admin, health).takes_persistent() ──▶ that server
//!      ▼ no
//!  candidates = servers where Eligibility::takes_new() and under their connection limit
//!  Selector::pick(&candidates, key) ──▶ server
//!      └─▶ SourceTable::insert, or Set-Cookie: CookieSpec::set_cookie_value(CookieTable::value)
//! ```
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use headway_lb::{Candidate, Key, Method, Selector};
//!
//! let mut selector = Selector::new(Method::SourceIpHash, 42);
//! let servers = [
//!     Candidate { id: 1, weight: 1, active: 0, response_time_us: 0 },
//!     Candidate { id: 2, weight: 3, active: 5, response_time_us: 800 },
//! ];
//! let client = Key::Ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)));
//! let i = selector.pick(&servers, client).unwrap();
//! assert_eq!(selector.pick(&servers, client), Some(i)); // same client, same server
//! ```
//!
//! # Invariants
//!
//! - Same seed and same calls give the same picks; hash placement does not depend on the seed.
//! - Nothing here panics on network input (`Cookie` headers, cookie values) or on any candidate
//!   slice, and [`Selector::pick`] allocates only when the candidate set changes.
#![forbid(unsafe_code)]

pub mod health;
pub mod persist;
pub mod select;

pub use health::{
    AdminState, CheckFailure, Eligibility, Health, HealthState, HttpExpect, StatusSet,
    StatusSetError, Transition,
};
pub use persist::{
    CookieCodec, CookieSpec, CookieSpecError, CookieTable, SameSite, SameSiteError, SourceTable,
    COOKIE_VALUE_LEN,
};
pub use select::{Candidate, Key, Method, MethodError, Selector};
