//! The L4 path: a `tcp` virtual server carries bytes both ways between a client and a server
//! of its group.
//!
//! Per connection: choose a server ([`Group::acquire`]: source-IP persistence and hashing see
//! the client's address), connect within the group's `connect_timeout` with the group's TCP
//! profile ([`crate::tcp_profile::connect`]) — on failure, try
//! another server, up to `retries` times —, then copy both ways until both sides have closed.
//! A half-close is carried (a FIN from one side shuts down writing towards the other, and the
//! other direction goes on). The connection is closed when neither side has sent a byte for
//! the virtual server's `client_idle_timeout`. The server slot is held for the connection's
//! lifetime, so `max_connections` limits concurrent connections.
//!
//! Each direction starts by copying through a small buffer; once it has carried
//! [`SPLICE_AFTER`] bytes it switches to zero-copy: `splice(2)` from one socket into a pipe and
//! from the pipe into the other socket ([`headway_io::splice::Pipe`]), so the rest never enters
//! user space. Short exchanges (most requests and responses) thus never pay for a pipe — two
//! pipes per connection were 8 of its 29 system calls for a 128 B answer (`pipe2`, `fcntl`,
//! `close`) — and long transfers still go zero-copy. If a pipe cannot be made (file
//! descriptors exhausted), the direction goes on copying.
//!
//! When a side's FIN is already in as its last bytes are read (a server that answers and
//! closes), those bytes are sent corked (`MSG_MORE`) and the FIN passed on right after rides on
//! their segment: one segment fewer towards the other side, whose acknowledgement then also
//! rides on its own FIN.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use headway_core::SystemClock;
use tokio::io::{AsyncWriteExt as _, Interest};
use tokio::net::TcpStream;

use crate::client_socket::Peer;
use crate::group::{Affinity, Lease};
use crate::http::Slot;
use crate::stats::Counter;

/// Pipe size per spliced direction.
const PIPE: usize = 64 * 1024;

/// Copy buffer per direction, before (or without) splicing.
const COPY_BUF: usize = 16 * 1024;

/// Bytes a direction copies before it switches to splicing.
const SPLICE_AFTER: u64 = 64 * 1024;

/// Serves one accepted client connection of a `tcp` virtual server.
pub async fn serve_connection(slot: Arc<Slot>, client: TcpStream, from: Peer) {
    let peer = from.addr;
    let vs = slot.vs.load_full();
    let Some(group) = vs.router.default_target().group().cloned() else {
        // The config gives every tcp virtual server a group; nothing else can serve bytes.
        tracing::error!(virtual_server = %vs.config.name, "a tcp virtual server without a group");
        return;
    };
    let cfg = &group.config;
    let counters = vs.shared.counters.clone();
    counters.requests.inc();
    let started = SystemClock::now();
    let mut tried = 0u64;
    let mut connected: Option<(TcpStream, Lease)> = None;
    for _ in 0..=cfg.retries {
        let lease = match group
            .acquire(Affinity {
                client: Some(peer.ip()),
                exclude: tried,
                ..Affinity::default()
            })
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(virtual_server = %vs.config.name, client = %peer, reason = ?e, "no server for a tcp connection");
                return;
            }
        };
        tried |= 1u64.checked_shl(lease.index as u32).unwrap_or(0);
        let addr = lease.server.address;
        let connect = crate::tcp_profile::connect(addr, cfg.tcp_profile.as_ref());
        match tokio::time::timeout(cfg.connect_timeout, connect).await {
            Ok(Ok(mut s)) => {
                lease.server.counters.connections_opened.inc();
                crate::group::passive_outcome(&lease.server, cfg, true);
                if let Some(version) = cfg.send_proxy_protocol {
                    // The header goes first, alone: the server reads it before any byte of
                    // the client's.
                    let destination = from
                        .destination
                        .or_else(|| client.local_addr().ok())
                        .unwrap_or(addr);
                    let header = crate::proxy_protocol::encode(version, peer, destination);
                    if let Err(e) = s.write_all(&header).await {
                        lease.server.counters.connect_failures.inc();
                        lease.server.counters.retries.inc();
                        tracing::debug!(server = %addr, error = %e, "the PROXY header could not be sent");
                        continue;
                    }
                }
                connected = Some((s, lease));
                break;
            }
            Ok(Err(e)) => {
                lease.server.counters.connect_failures.inc();
                lease.server.counters.retries.inc();
                crate::group::passive_outcome(&lease.server, cfg, false);
                tracing::debug!(server = %addr, error = %e, "connect failed");
            }
            Err(_) => {
                lease.server.counters.connect_failures.inc();
                lease.server.counters.retries.inc();
                crate::group::passive_outcome(&lease.server, cfg, false);
                tracing::debug!(server = %addr, "connect timed out");
            }
        }
    }
    let Some((server, lease)) = connected else {
        return;
    };
    // Both sockets carry their TCP profiles already: the client's from the accept, the
    // server's from `tcp_profile::connect`.
    let idle = vs.config.client_idle_timeout;
    drop(vs);
    let activity = AtomicU64::new(0);
    let base = SystemClock::now();
    let touch = || {
        activity.store(
            SystemClock::now().duration_since(base).as_millis() as u64,
            Relaxed,
        )
    };
    let srv = lease.server.clone();
    let ended = AtomicU8::new(0);
    let up = one_way(
        &client,
        &server,
        &counters.bytes_in,
        &srv.counters.bytes_out,
        &touch,
        &ended,
    );
    let down = one_way(
        &server,
        &client,
        &counters.bytes_out,
        &srv.counters.bytes_in,
        &touch,
        &ended,
    );
    let both = async { tokio::join!(up, down) };
    tokio::pin!(both);
    let mut wait = idle;
    loop {
        tokio::select! {
            _ = &mut both => break,
            _ = tokio::time::sleep(wait) => {
                let last = Duration::from_millis(activity.load(Relaxed));
                let since = SystemClock::now().duration_since(base).saturating_sub(last);
                if since >= idle {
                    tracing::debug!(client = %peer, "closing idle tcp connection");
                    break;
                }
                wait = idle - since;
            }
        }
    }
    counters
        .latency
        .record(SystemClock::now().saturating_duration_since(started));
    drop(lease);
}

/// Moves `from`'s bytes to `to` until end of stream, then shuts `to` down for writing
/// (half-close) if the other direction is still going. Copies the first [`SPLICE_AFTER`]
/// bytes through a buffer, then splices.
///
/// `ended` counts the directions that have finished: the second to finish skips the
/// `shutdown`, since both sockets are closed right after (the close sends the same FIN) —
/// one system call less per connection.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    a: &Counter,
    b: &Counter,
    touch: &impl Fn(),
    ended: &AtomicU8,
) {
    // Read into spare capacity: nothing is zeroed (2 × 16 KiB per connection otherwise).
    let mut buf = Vec::with_capacity(COPY_BUF);
    if copy_one_way(from, to, &mut buf, SPLICE_AFTER, a, b, touch).await == CopyEnd::Limit {
        match headway_io::splice::Pipe::new(PIPE) {
            Ok(p) => {
                drop(buf);
                splice_rest(from, to, p, a, b, touch).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "no pipe for splice; copying through a buffer");
                copy_one_way(from, to, &mut buf, u64::MAX, a, b, touch).await;
            }
        }
    }
    if ended.fetch_add(1, Relaxed) == 0 {
        let _ = socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write);
    }
}

/// Splices `from`'s bytes into `to` through `p` until end of stream or an error.
async fn splice_rest(
    from: &TcpStream,
    to: &TcpStream,
    mut p: headway_io::splice::Pipe,
    a: &Counter,
    b: &Counter,
    touch: &impl Fn(),
) {
    let mut eof = false;
    loop {
        if eof && p.held() == 0 {
            return;
        }
        let room = !eof && p.held() < PIPE;
        tokio::select! {
            r = from.readable(), if room => {
                if r.is_err() {
                    return;
                }
                match from.try_io(Interest::READABLE, || p.fill(from)) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        touch();
                        a.add(n as u64);
                        b.add(n as u64);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
            r = to.writable(), if p.held() > 0 => {
                if r.is_err() {
                    return;
                }
                match to.try_io(Interest::WRITABLE, || p.drain(to)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        }
    }
}

/// How [`copy_one_way`] stopped.
#[derive(Debug, PartialEq, Eq)]
enum CopyEnd {
    /// `from` ended its stream, or either side failed.
    Done,
    /// `limit` bytes were carried; the stream goes on.
    Limit,
}

/// Copies `from`'s bytes to `to` through `buf`'s capacity until end of stream, an error, or at
/// least `limit` bytes carried (checked after each whole write).
async fn copy_one_way(
    from: &TcpStream,
    to: &TcpStream,
    buf: &mut Vec<u8>,
    limit: u64,
    a: &Counter,
    b: &Counter,
    touch: &impl Fn(),
) -> CopyEnd {
    let mut carried = 0u64;
    loop {
        if carried >= limit {
            return CopyEnd::Limit;
        }
        if from.readable().await.is_err() {
            return CopyEnd::Done;
        }
        buf.clear();
        let n = match from.try_read_buf(buf) {
            Ok(0) => return CopyEnd::Done,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return CopyEnd::Done,
        };
        let mut n = n;
        // The stream ends with these bytes: they go corked, so the FIN that follows them
        // (`one_way`'s shutdown, or the close) rides on their segment.
        let mut last = false;
        if n < buf.capacity() {
            if read_closed(from) {
                // The peer's FIN is in. One more read makes sure nothing came between the read
                // above and the FIN; it is the read that would have found the end anyway.
                match from.try_read_buf(buf) {
                    Ok(0) => last = true,
                    Ok(m) => n += m,
                    Err(_) => {}
                }
            } else {
                // A short read emptied the socket: forget its readiness now, instead of
                // learning that from one more `recvfrom` returning EAGAIN. Safe with
                // edge-triggered epoll: bytes or a FIN that arrive later raise a new event.
                let _ = from.try_io(Interest::READABLE, || {
                    Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                });
            }
        }
        touch();
        let mut sent = 0;
        while sent < n {
            if to.writable().await.is_err() {
                return CopyEnd::Done;
            }
            let rest = &buf[sent..n];
            let r = if last {
                to.try_io(Interest::WRITABLE, || {
                    headway_io::stream::send_more(to, &[std::io::IoSlice::new(rest)])
                })
            } else {
                to.try_write(rest)
            };
            match r {
                Ok(m) => sent += m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return CopyEnd::Done,
            }
        }
        a.add(n as u64);
        b.add(n as u64);
        carried += n as u64;
        if last {
            return CopyEnd::Done;
        }
    }
}

/// Whether the reactor has seen `s`'s peer end its stream (its FIN arrived), without waiting.
fn read_closed(s: &TcpStream) -> bool {
    let ready = std::pin::pin!(s.ready(Interest::READABLE));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    matches!(std::future::Future::poll(ready, &mut cx), std::task::Poll::Ready(Ok(r)) if r.is_read_closed())
}
