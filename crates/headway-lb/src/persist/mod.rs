//! Persistence: sending a client back to the server it used before.
//!
//! Two mechanisms, as the ADCs Headway replaces offer them:
//!
//! - **Source IP** ([`SourceTable`]): a bounded table from the client's address (masked, so a
//!   `/24` can share a server) to a server id, with an idle timeout. Works for any protocol, but
//!   clients behind one NAT share a server and a client whose address changes loses it.
//! - **Inserted cookie** ([`CookieCodec`], [`CookieTable`], [`CookieSpec`]): the proxy sets a
//!   cookie naming the server on the first response and reads it back on later requests. The
//!   value is a keyed hash of the server's stable key, so it reveals no address and cannot be
//!   forged to name a server the client was never sent to (see [`CookieCodec`]).
//!
//! What this module does not do: it keeps no clock (every call that needs time takes `now`),
//! parses no HTTP beyond the value of one `Cookie` header, and does not decide whether the
//! persisted server is still eligible — the caller checks that (a draining server still takes
//! its persistent clients; see [`crate::health::Eligibility`]) and re-picks when it is not.
//!
//! Call order per request (source IP): [`SourceTable::lookup`]; on a miss or an ineligible
//! server, pick with [`crate::select::Selector`] and [`SourceTable::insert`]. For cookies:
//! [`CookieSpec::find_in`] on each `Cookie` header, [`CookieTable::server`] on the value; on a
//! miss, pick and add `Set-Cookie: {CookieSpec::set_cookie_value(CookieTable::value(id))}` to
//! the response.

mod cookie;
mod source;

pub use cookie::{
    cookie_value, CookieCodec, CookieSpec, CookieSpecError, CookieTable, SameSite, SameSiteError,
    COOKIE_VALUE_LEN,
};
pub use source::SourceTable;
