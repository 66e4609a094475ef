//! Shadow traffic (a virtual server's `mirror`): a copy of each bodiless request that goes to
//! a server is sent to a server of the mirror group too, in a task of its own, and its answer
//! read to the end and dropped. The client's request never waits for the copy; at most
//! [`MAX_IN_FLIGHT`] copies per virtual server are in flight (more are skipped and counted),
//! so a slow or dead mirror group costs a bounded number of tasks and connections.

use std::sync::Arc;

use http::Request;
use http_body_util::BodyExt as _;

use super::{upstream, Conn, Flow, VsRuntime};
use crate::group::Group;
use crate::stats::{Counter, Gauge, StatusCounters};

/// Most copies in flight per virtual server.
pub const MAX_IN_FLIGHT: u32 = 64;

/// A virtual server's mirror counters (lasting across reloads).
#[derive(Debug, Default)]
pub struct MirrorCounters {
    /// Copies sent.
    pub sent: Counter,
    /// Copies not sent: [`MAX_IN_FLIGHT`] were in flight.
    pub skipped: Counter,
    /// Copies that got no answer (no server, connect failure, timeout, a broken answer).
    pub failed: Counter,
    /// Answers to copies, by status class.
    pub responses: StatusCounters,
    /// Copies in flight now.
    pub in_flight: Gauge,
}

/// Sends a copy of the request `parts` describes (bodiless) to `group`, unless too many copies
/// are in flight.
pub(super) fn copy(
    conn: &Arc<Conn>,
    vs: &Arc<VsRuntime>,
    group: &Arc<Group>,
    parts: &http::request::Parts,
) {
    let counters = vs.shared.mirror.clone();
    if !counters.in_flight.try_inc_below(MAX_IN_FLIGHT) {
        counters.skipped.inc();
        return;
    }
    counters.sent.inc();
    let mut copy = Request::new(()).into_parts().0;
    copy.method = parts.method.clone();
    copy.uri = parts.uri.clone();
    copy.version = parts.version;
    copy.headers = parts.headers.clone();
    let (conn, vs, group) = (conn.clone(), vs.clone(), group.clone());
    tokio::spawn(async move {
        let answered = send(&conn, &vs, &group, copy).await;
        if let Some(status) = answered {
            counters.responses.record(status);
        } else {
            counters.failed.inc();
        }
        counters.in_flight.dec();
    });
}

/// One copy: its status once its body has been read to the end, `None` without a whole answer.
async fn send(
    conn: &Arc<Conn>,
    vs: &Arc<VsRuntime>,
    group: &Arc<Group>,
    parts: http::request::Parts,
) -> Option<u16> {
    let Flow::Continue(up) = upstream(conn, vs, group, parts, None, None, None).await else {
        return None;
    };
    // Counted on the mirror, not on the virtual server.
    let answer = up.background();
    let status = answer.up.head.status.as_u16();
    let mut body = answer.body();
    while let Some(frame) = body.frame().await {
        frame.ok()?;
    }
    Some(status)
}
