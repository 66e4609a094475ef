//! The tunnel's UDP socket with forward error correction between it and quinn.
//!
//! [`FecSocket`] wraps the runtime's UDP socket (`quinn::AsyncUdpSocket`, with its GSO/GRO
//! batching) and runs every datagram through a [`headway_fec::Fec`]: each datagram quinn sends
//! gets the FEC header (7 bytes) and, on a protected path, a copy in the send window; each
//! datagram received loses its header before quinn sees it, repair shards are consumed, and
//! datagrams restored from them are handed to quinn as if they had arrived — in order with
//! those the layer held back behind a missing datagram of a long block (released when it is
//! restored, or by the task when the hold ends). A task per socket
//! waits for the end of each burst ([`headway_fec::Fec::poll_timeout`]) and sends its repair, and sends the probes that measure the path.
//! The FEC decisions are all `headway-fec`'s; this module only moves bytes and keeps time.
//!
//! quinn sees datagrams 7 bytes smaller than the wire's: the endpoint lowers quinn's MTU
//! discovery ceiling by [`headway_fec::REPAIR_OVERHEAD`] so that data and repair datagrams
//! both fit the path.
//!
//! Both appliances of a pair must run FEC (the header is not QUIC); a datagram without the
//! header is still accepted, so a peer that sends without FEC is understood.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{ready, Context, Poll, Waker};
use std::time::Instant;

use headway_core::clock::SystemClock;
use headway_fec::wire::Kind;
use headway_fec::{Fec, PathParams, Received, Stats, OVERHEAD};
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::sync::Notify;

/// A UDP socket with FEC, for `quinn::Endpoint::new_with_abstract_socket`.
pub(crate) struct FecSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    state: Mutex<State>,
    wake: Arc<Notify>,
}

struct State {
    fec: Fec,
    /// The datagrams of one `try_send`, headers added.
    buf: Vec<u8>,
    /// When the repair task wakes next (`None`: when woken). A send that makes the layer's
    /// next deadline earlier wakes the task.
    task_wakes_at: Option<Instant>,
    /// The lost-bytes total each connection (by `stable_id`) had at its last `note_written`.
    lost_seen: HashMap<usize, u64>,
    /// quinn's receive task, woken when the repair task releases datagrams the layer held
    /// back (a timer, not a datagram, ended their wait).
    recv_waker: Option<Waker>,
}

/// QUIC's short header, AEAD tag and STREAM frame header cost about 36 bytes of a 1,400-byte
/// datagram: a written byte costs `1 + 1 / QUIC_HEADER_SHARE` datagram bytes. The estimate
/// errs low (towards repairing a little early), never towards skipping a real tail.
const QUIC_HEADER_SHARE: u64 = 48;

/// Connections whose lost-bytes totals are remembered (a tunnel has a few per peer); past it,
/// all but the current one are forgotten (a forgotten live connection's next call counts its
/// whole total once more, which errs towards skipping repair for one block).
const MAX_LOST_SEEN: usize = 1024;

impl fmt::Debug for FecSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FecSocket")
            .field("inner", &self.inner)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl FecSocket {
    /// Wraps `inner` and starts the repair task (call inside a tokio runtime). The task ends
    /// when the socket is dropped.
    pub(crate) fn wrap(inner: Arc<dyn AsyncUdpSocket>, fec: Fec) -> Arc<Self> {
        let wake = Arc::new(Notify::new());
        let socket = Arc::new(Self {
            inner,
            state: Mutex::new(State {
                fec,
                buf: Vec::new(),
                task_wakes_at: None,
                lost_seen: HashMap::new(),
                recv_waker: None,
            }),
            wake: wake.clone(),
        });
        tokio::spawn(repair_task(Arc::downgrade(&socket), wake));
        socket
    }

    /// Sets the path parameters for a peer address.
    pub(crate) fn configure(&self, addr: std::net::SocketAddr, params: PathParams) {
        self.lock().fec.configure(addr, params);
    }

    /// The application wrote `bytes` more of stream data towards `addr`, over the connection
    /// `conn` (its `stable_id`), which has declared `lost_total` bytes lost so far. The layer is
    /// told the datagram bytes that writing will cost: the stream bytes, their QUIC headers
    /// (estimated) and the retransmission of what the connection lost since its last call.
    /// (Each appliance of a pair dials the other, so two connections share one address: the
    /// lost totals are kept per connection.)
    pub(crate) fn note_written(
        &self,
        addr: std::net::SocketAddr,
        conn: usize,
        bytes: u64,
        lost_total: u64,
    ) {
        let mut state = self.lock();
        let seen = state.lost_seen.entry(conn).or_insert(0);
        let lost = lost_total.saturating_sub(*seen);
        *seen = lost_total;
        if state.lost_seen.len() > MAX_LOST_SEEN {
            state.lost_seen.retain(|c, _| *c == conn);
        }
        let cost = bytes + bytes / QUIC_HEADER_SHARE + lost;
        state.fec.handle_written(SystemClock::now(), addr, cost);
    }

    /// The application has nothing more to write towards `addr` for now (see
    /// `headway_fec::Fec::handle_writer_idle`); wakes the repair task if that makes a long
    /// block's repair due.
    pub(crate) fn note_idle(&self, addr: std::net::SocketAddr) {
        let mut state = self.lock();
        let State {
            fec, task_wakes_at, ..
        } = &mut *state;
        fec.handle_writer_idle(SystemClock::now(), addr);
        let wake = earlier_deadline(fec, task_wakes_at);
        drop(state);
        if wake {
            self.wake.notify_one();
        }
    }

    /// The loss to and from `addr` (see `headway_fec::Fec::path_loss`).
    pub(crate) fn path_loss(&self, addr: std::net::SocketAddr) -> (Option<f64>, Option<f64>) {
        self.lock().fec.path_loss(addr)
    }

    /// The FEC counters.
    pub(crate) fn stats(&self) -> Stats {
        self.lock().fec.stats()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent across a panic in another thread (no invariant spans an
        // unwind point), so a poisoned lock is used as it is.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for FecSocket {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

impl AsyncUdpSocket for FecSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let seg = transmit
            .segment_size
            .unwrap_or(transmit.contents.len())
            .max(1);
        let now = SystemClock::now();
        let mut guard = self.lock();
        let State {
            fec,
            buf,
            task_wakes_at,
            ..
        } = &mut *guard;
        buf.clear();
        let (mut sent, mut kept) = (0, 0);
        for datagram in transmit.contents.chunks(seg) {
            let header = fec.handle_send(now, transmit.destination, datagram);
            kept += usize::from(matches!(Kind::of(header[0]), Some(Kind::Kept | Kind::Held)));
            sent += 1;
            buf.extend_from_slice(&header);
            buf.extend_from_slice(datagram);
        }
        let r = self.inner.try_send(&Transmit {
            destination: transmit.destination,
            ecn: transmit.ecn,
            contents: buf,
            segment_size: transmit.segment_size.map(|s| s + OVERHEAD),
            src_ip: transmit.src_ip,
        });
        if r.is_err() {
            // Not sent (quinn retries the same datagrams): keep the sequence consecutive.
            fec.cancel_send(transmit.destination, sent, kept);
        } else {
            // A full block's repair goes out right behind it (best effort: a full socket
            // buffer drops it, and the transport's retransmission covers the loss).
            fec.handle_sent(now, transmit.destination);
            let mut repair = 0;
            while let Some((destination, datagram)) = fec.poll_transmit() {
                repair += 1;
                let _ = self.inner.try_send(&Transmit {
                    destination,
                    ecn: None,
                    contents: &datagram,
                    segment_size: None,
                    src_ip: None,
                });
            }
            if repair > 0 {
                let st = fec.stats();
                tracing::trace!(
                    datagrams = repair,
                    kept_sent = st.kept_sent,
                    repair_sent = st.repair_sent,
                    "fec: block full, sent its repair"
                );
            }
        }
        // A burst opened: its end may come before what the task sleeps for (the next probe).
        let wake = earlier_deadline(fec, task_wakes_at);
        drop(guard);
        if wake {
            self.wake.notify_one();
        }
        r
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            let restored = {
                let mut state = self.lock();
                if !state
                    .recv_waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    state.recv_waker = Some(cx.waker().clone());
                }
                deliver_restored(&mut state.fec, bufs, meta, 0)
            };
            if restored > 0 {
                tracing::trace!(
                    restored,
                    "fec: restored (or held back) datagrams handed to quinn"
                );
                return Poll::Ready(Ok(restored));
            }
            let got = ready!(self.inner.poll_recv(cx, bufs, meta))?;
            let now = SystemClock::now();
            let mut state = self.lock();
            let held_before = state.fec.stats().held;
            let mut out = 0;
            for i in 0..got.min(bufs.len()).min(meta.len()) {
                let m = meta[i];
                let len = strip(&mut state.fec, now, &m, &mut bufs[i]);
                if len.0 == 0 {
                    continue;
                }
                if out != i {
                    let (head, tail) = bufs.split_at_mut(i);
                    head[out][..len.0].copy_from_slice(&tail[0][..len.0]);
                }
                meta[out] = RecvMeta {
                    len: len.0,
                    stride: len.1,
                    ..m
                };
                out += 1;
            }
            let received = out;
            out = deliver_restored(&mut state.fec, bufs, meta, out);
            // A datagram held back behind a missing one waits at most until a deadline the
            // task may not sleep for yet.
            let State {
                fec, task_wakes_at, ..
            } = &mut *state;
            if fec.stats().held > held_before && earlier_deadline(fec, task_wakes_at) {
                self.wake.notify_one();
            }
            drop(state);
            if out > received {
                tracing::trace!(
                    restored = out - received,
                    "fec: restored (or held back) datagrams handed to quinn"
                );
            }
            if out > 0 {
                return Poll::Ready(Ok(out));
            }
            // Only repair shards, probes (or malformed datagrams) arrived: read again.
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Whether the layer's next deadline comes before `task_wakes_at` (the repair task sleeps
/// too long); if so it becomes the task's wake time.
fn earlier_deadline(fec: &Fec, task_wakes_at: &mut Option<Instant>) -> bool {
    let due = fec.poll_timeout();
    let earlier = due.is_some_and(|d| task_wakes_at.is_none_or(|t| d < t));
    if earlier {
        *task_wakes_at = due;
    }
    earlier
}

/// Runs each datagram of one receive buffer (`meta.len` bytes in segments of `meta.stride`)
/// through the FEC layer and packs what quinn should see to the front of the buffer. Returns
/// the bytes kept and their stride (every segment but the last is that long: GRO only
/// coalesces datagrams of one size, and the header is the same size on each).
fn strip(fec: &mut Fec, now: std::time::Instant, m: &RecvMeta, buf: &mut [u8]) -> (usize, usize) {
    let len = m.len.min(buf.len());
    let stride = m.stride.max(1);
    let mut written = 0;
    let mut first = None;
    let mut off = 0;
    while off < len {
        let end = (off + stride).min(len);
        let keep = match fec.handle_recv(now, m.addr, &buf[off..end]) {
            Received::Data { offset } => Some(off + offset),
            Received::Plain => Some(off),
            Received::Repair | Received::Probe | Received::Held | Received::Invalid => None,
        };
        if let Some(from) = keep {
            let n = end - from;
            buf.copy_within(from..end, written);
            written += n;
            first.get_or_insert(n);
        }
        off = end;
    }
    (written, first.unwrap_or(0).max(1))
}

/// Copies restored datagrams into the free receive slots from `out` on; returns the slots
/// used in all. What does not fit waits for the next call.
fn deliver_restored(
    fec: &mut Fec,
    bufs: &mut [IoSliceMut<'_>],
    meta: &mut [RecvMeta],
    mut out: usize,
) -> usize {
    while out < bufs.len() && out < meta.len() {
        let Some((addr, datagram)) = fec.poll_recovered() else {
            break;
        };
        if datagram.is_empty() || datagram.len() > bufs[out].len() {
            continue;
        }
        bufs[out][..datagram.len()].copy_from_slice(&datagram);
        meta[out] = RecvMeta {
            addr,
            len: datagram.len(),
            stride: datagram.len(),
            ecn: None,
            dst_ip: None,
        };
        out += 1;
    }
    out
}

/// Sends each burst's repair when the burst ends, and the probes; returns when the socket is
/// dropped.
async fn repair_task(socket: Weak<FecSocket>, wake: Arc<Notify>) {
    loop {
        let deadline = {
            let Some(s) = socket.upgrade() else { return };
            let mut state = s.lock();
            let d = state.fec.poll_timeout();
            state.task_wakes_at = d;
            d
        };
        match deadline {
            None => wake.notified().await,
            Some(t) => {
                tokio::select! {
                    () = tokio::time::sleep_until(t.into()) => {}
                    () = wake.notified() => {}
                }
            }
        }
        let Some(s) = socket.upgrade() else { return };
        let (repair, st): (Vec<_>, _) = {
            let mut state = s.lock();
            let before = state.fec.stats().holes_given_up;
            state.fec.handle_timeout(SystemClock::now());
            if state.fec.stats().holes_given_up > before {
                // What they held back waits in the layer for quinn's next read.
                if let Some(w) = &state.recv_waker {
                    w.wake_by_ref();
                }
            }
            let repair = std::iter::from_fn(|| state.fec.poll_transmit()).collect();
            (repair, state.fec.stats())
        };
        if repair.is_empty() {
            continue;
        }
        tracing::trace!(
            datagrams = repair.len(),
            kept_sent = st.kept_sent,
            repair_sent = st.repair_sent,
            probes_sent = st.probes_sent,
            "fec: a burst ended or probes are due, sending them"
        );
        let mut poller = s.inner.clone().create_io_poller();
        for (destination, datagram) in repair {
            let t = Transmit {
                destination,
                ecn: None,
                contents: &datagram,
                segment_size: None,
                src_ip: None,
            };
            // Repair is best effort: one wait for a full send buffer, then it is dropped.
            if let Err(e) = s.inner.try_send(&t) {
                if e.kind() == io::ErrorKind::WouldBlock {
                    let _ = std::future::poll_fn(|cx| poller.as_mut().poll_writable(cx)).await;
                    let _ = s.inner.try_send(&t);
                }
            }
        }
    }
}
