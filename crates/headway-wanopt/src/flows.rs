//! The live flow table: every flow the appliance carries now, with its own byte counters
//! (WANScaler's and SteelHead's "current connections").
//!
//! A flow task registers itself when it starts ([`Flows::register`]) and is removed when its
//! [`FlowGuard`] drops, on every way out (done, reset, failed open, the task aborted). The
//! pumps count each flow's bytes through a [`Meter`] into the flow's [`FlowBytes`] and its
//! (peer, class) group's [`Counters`] at once: two relaxed atomic adds per read or write.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use headway_core::SystemClock;
use headway_tunnel::ServiceClass;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::stats::{class_name, Counters};

/// One flow's bytes, seen from this appliance (as [`Counters`]).
#[derive(Debug, Default)]
pub struct FlowBytes {
    /// Read from the local TCP socket.
    pub lan_in: AtomicU64,
    /// Written to the local TCP socket.
    pub lan_out: AtomicU64,
    /// Read from the tunnel stream.
    pub wan_in: AtomicU64,
    /// Written to the tunnel stream.
    pub wan_out: AtomicU64,
}

/// What a flow's pump counts into: its group's counters and its own bytes.
#[derive(Debug, Clone, Copy)]
pub struct Meter<'a> {
    /// The (peer, class) group's counters.
    pub group: &'a Counters,
    /// The flow's own.
    pub flow: &'a FlowBytes,
}

impl Meter<'_> {
    /// `n` bytes read from the local socket.
    pub fn lan_in(&self, n: u64) {
        Counters::add(&self.group.lan_in, n);
        Counters::add(&self.flow.lan_in, n);
    }

    /// `n` bytes written to the local socket.
    pub fn lan_out(&self, n: u64) {
        Counters::add(&self.group.lan_out, n);
        Counters::add(&self.flow.lan_out, n);
    }

    /// `n` bytes read from the tunnel stream.
    pub fn wan_in(&self, n: u64) {
        Counters::add(&self.group.wan_in, n);
        Counters::add(&self.flow.wan_in, n);
    }

    /// `n` bytes written to the tunnel stream.
    pub fn wan_out(&self, n: u64) {
        Counters::add(&self.group.wan_out, n);
        Counters::add(&self.flow.wan_out, n);
    }
}

/// Which way a flow was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// A local client connected here (an explicit service or an intercepted connection).
    Outbound,
    /// The peer opened it; this appliance connected to its destination.
    Inbound,
}

/// What is known of a flow when it starts.
#[derive(Debug, Clone)]
pub struct FlowInfo {
    /// Which way it was opened.
    pub direction: Direction,
    /// The peer's configured name ([`crate::stats::NO_PEER`] for a flow no rule matched).
    pub peer: String,
    /// Its service class.
    pub class: ServiceClass,
    /// The local client (outbound flows; the peer does not say who its client was).
    pub client: Option<SocketAddr>,
    /// Where it goes.
    pub destination: SocketAddr,
    /// `None`: through the tunnel; otherwise why it goes direct (fail-open).
    pub passed_through: Option<&'static str>,
}

struct Entry {
    info: FlowInfo,
    started: Instant,
    bytes: Arc<FlowBytes>,
}

/// The flows carried now.
#[derive(Default)]
pub struct Flows {
    next: AtomicU64,
    live: Mutex<BTreeMap<u64, Entry>>,
}

impl std::fmt::Debug for Flows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flows")
            .field("live", &self.live.lock().len())
            .finish()
    }
}

/// A registered flow: its bytes to count into; dropping it removes the flow from the table.
pub struct FlowGuard<'a> {
    flows: &'a Flows,
    id: u64,
    /// The flow's own byte counters.
    pub bytes: Arc<FlowBytes>,
}

impl Drop for FlowGuard<'_> {
    fn drop(&mut self) {
        self.flows.live.lock().remove(&self.id);
    }
}

impl FlowGuard<'_> {
    /// Marks the flow as going direct for `reason` (it failed open after it was registered).
    pub fn pass_through(&self, reason: &'static str) {
        if let Some(e) = self.flows.live.lock().get_mut(&self.id) {
            e.info.passed_through = Some(reason);
        }
    }
}

impl Flows {
    /// Adds a flow to the table until the returned guard drops.
    pub fn register(&self, info: FlowInfo) -> FlowGuard<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let bytes = Arc::new(FlowBytes::default());
        self.live.lock().insert(
            id,
            Entry {
                info,
                started: SystemClock::now(),
                bytes: bytes.clone(),
            },
        );
        FlowGuard {
            flows: self,
            id,
            bytes,
        }
    }

    /// Flows carried now, oldest first.
    pub fn snapshot(&self) -> Vec<FlowSnapshot> {
        let now = SystemClock::now();
        self.live
            .lock()
            .iter()
            .map(|(id, e)| {
                let b = &e.bytes;
                FlowSnapshot {
                    id: *id,
                    direction: e.info.direction,
                    peer: e.info.peer.clone(),
                    class: class_name(e.info.class),
                    client: e.info.client.map(|a| a.to_string()),
                    destination: e.info.destination.to_string(),
                    age_seconds: now.saturating_duration_since(e.started).as_secs_f64(),
                    passed_through: e.info.passed_through,
                    lan_in: b.lan_in.load(Ordering::Relaxed),
                    lan_out: b.lan_out.load(Ordering::Relaxed),
                    wan_in: b.wan_in.load(Ordering::Relaxed),
                    wan_out: b.wan_out.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// One live flow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowSnapshot {
    /// Its number on this appliance (counts up from 1).
    pub id: u64,
    /// Which way it was opened.
    pub direction: Direction,
    /// The peer's configured name.
    pub peer: String,
    /// Its service class (`dedup-disk`, `compress`, …).
    pub class: &'static str,
    /// The local client, for outbound flows.
    pub client: Option<String>,
    /// Where it goes.
    pub destination: String,
    /// Seconds since it started.
    pub age_seconds: f64,
    /// `None`: optimized through the tunnel; otherwise why it goes direct.
    pub passed_through: Option<&'static str>,
    /// Bytes read from the local socket.
    pub lan_in: u64,
    /// Bytes written to the local socket.
    pub lan_out: u64,
    /// Bytes read from the tunnel.
    pub wan_in: u64,
    /// Bytes written to the tunnel.
    pub wan_out: u64,
}

/// A stream whose reads and writes count into a flow's LAN bytes (a flow that failed open is
/// copied by tokio, not by a pump).
pub(crate) struct Counted<'a, S> {
    pub inner: S,
    pub bytes: &'a FlowBytes,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        Counters::add(&self.bytes.lan_in, n as u64);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            Counters::add(&self.bytes.lan_out, n as u64);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(direction: Direction) -> FlowInfo {
        FlowInfo {
            direction,
            peer: "dc".into(),
            class: ServiceClass::DedupDisk,
            client: Some("10.1.0.5:40000".parse().unwrap()),
            destination: "10.2.0.9:445".parse().unwrap(),
            passed_through: None,
        }
    }

    #[test]
    fn a_flow_is_listed_while_its_guard_lives_with_its_own_bytes() {
        let flows = Flows::default();
        let group = Counters::default();
        let a = flows.register(info(Direction::Outbound));
        let b = flows.register(info(Direction::Inbound));
        let m = Meter {
            group: &group,
            flow: &a.bytes,
        };
        m.lan_in(1000);
        m.wan_out(300);
        Meter {
            group: &group,
            flow: &b.bytes,
        }
        .lan_out(7);
        b.pass_through("peer_down");
        let s = flows.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].id, s[0].lan_in, s[0].wan_out), (1, 1000, 300));
        assert_eq!((s[0].class, s[0].passed_through), ("dedup-disk", None));
        assert_eq!((s[1].lan_out, s[1].passed_through), (7, Some("peer_down")));
        assert_eq!(group.lan_in.load(Ordering::Relaxed), 1000);
        assert_eq!(group.lan_out.load(Ordering::Relaxed), 7);
        drop(a);
        let s = flows.snapshot();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].id, 2);
        drop(b);
        assert!(flows.snapshot().is_empty());
    }

    #[tokio::test]
    async fn a_counted_stream_counts_what_it_reads_and_writes() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let bytes = FlowBytes::default();
        let (near, mut far) = tokio::io::duplex(64);
        let mut c = Counted {
            inner: near,
            bytes: &bytes,
        };
        far.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).await.unwrap();
        c.write_all(b"abc").await.unwrap();
        assert_eq!(bytes.lan_in.load(Ordering::Relaxed), 5);
        assert_eq!(bytes.lan_out.load(Ordering::Relaxed), 3);
    }
}
