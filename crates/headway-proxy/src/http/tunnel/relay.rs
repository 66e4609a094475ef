//! Copying both ways between two streams without holding a buffer while nothing is in flight.
//!
//! Each direction reads into its worker thread's scratch buffer and writes what it read at
//! once, in the same poll; only what that write does not take is kept, in a buffer of the
//! direction's own that is freed as soon as it has been written. A quiet tunnel therefore holds
//! no relay buffer, where tokio's `copy_bidirectional` keeps one per direction for the
//! connection's life (32 KiB per tunnel at 16 KiB each: 3.2 GB for 100,000 idle WebSockets).
//! A read takes up to [`SCRATCH_LEN`] bytes, so an 8 KiB WebSocket message and its frame header
//! move in one read and one write.
//!
//! A direction whose source ends shuts its destination down once everything read has been
//! written (a half-close is carried); the relay ends when both directions have, or as soon as
//! either fails. Writes are flushed when the source has nothing more for now (TLS keeps records
//! back until then). A direction moves at most [`BURST`] reads per poll and then yields, so a
//! busy tunnel does not keep its worker from the other connections.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes a read may take.
pub const SCRATCH_LEN: usize = 16 * 1024;

/// Reads one direction moves per poll before it yields.
const BURST: usize = 16;

thread_local! {
    /// The scratch buffer of this thread's relays; used within one poll only.
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_LEN].into_boxed_slice());
}

/// One direction's state.
#[derive(Debug, Default)]
pub struct Direction {
    /// Bytes read and not yet written (empty, unallocated, when none are).
    held: Vec<u8>,
    /// How many of `held` are written.
    at: usize,
    /// The source has ended.
    eof: bool,
    /// The destination was shut down: this direction is over.
    done: bool,
    /// Written since the last flush.
    dirty: bool,
}

/// What one read from the source led to.
enum Step {
    /// Nothing to read now.
    Idle,
    /// The source ended.
    Eof,
    /// Bytes read and written (or held).
    Moved,
    /// A read or write failed.
    Failed(io::Error),
}

impl Direction {
    /// A direction with `first` to write before anything read.
    pub fn starting_with(first: Vec<u8>) -> Self {
        Direction {
            held: first,
            ..Direction::default()
        }
    }

    /// Bytes held for a destination that has not taken them yet.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.len() - self.at
    }

    /// Whether the buffer of held bytes is allocated.
    #[cfg(test)]
    fn holds_a_buffer(&self) -> bool {
        self.held.capacity() > 0
    }

    /// Moves bytes from `from` to `to` until neither can go on now (`Pending`), or the
    /// direction is over (`Ready(Ok)`: the source ended and the destination is shut down).
    pub fn poll_move<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut R,
        to: &mut W,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        let mut reads = 0;
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if self.at < self.held.len() {
                let n =
                    std::task::ready!(Pin::new(&mut *to).poll_write(cx, &self.held[self.at..]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.dirty = true;
                self.at += n;
                if self.at == self.held.len() {
                    // Free it: a quiet tunnel holds nothing.
                    self.held = Vec::new();
                    self.at = 0;
                }
                continue;
            }
            if self.eof {
                if self.dirty {
                    std::task::ready!(Pin::new(&mut *to).poll_flush(cx))?;
                    self.dirty = false;
                }
                std::task::ready!(Pin::new(&mut *to).poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            if reads == BURST {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            reads += 1;
            match self.read_and_write(cx, from, to) {
                Step::Idle => {
                    if self.dirty {
                        if let Poll::Ready(r) = Pin::new(&mut *to).poll_flush(cx) {
                            r?;
                            self.dirty = false;
                        }
                    }
                    return Poll::Pending;
                }
                Step::Eof => self.eof = true,
                Step::Moved => self.dirty = true,
                Step::Failed(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// One read into the thread's scratch buffer and one write of what came; the rest held.
    fn read_and_write<R, W>(&mut self, cx: &mut Context<'_>, from: &mut R, to: &mut W) -> Step
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let mut buf = ReadBuf::new(&mut scratch[..]);
            let n = match Pin::new(&mut *from).poll_read(cx, &mut buf) {
                Poll::Pending => return Step::Idle,
                Poll::Ready(Err(e)) => return Step::Failed(e),
                Poll::Ready(Ok(())) => buf.filled().len(),
            };
            if n == 0 {
                return Step::Eof;
            }
            let data = &scratch[..n];
            match Pin::new(&mut *to).poll_write(cx, data) {
                Poll::Ready(Ok(0)) => Step::Failed(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(m)) => {
                    if m < n {
                        self.held = data[m..].to_vec();
                    }
                    Step::Moved
                }
                Poll::Pending => {
                    self.held = data.to_vec();
                    Step::Moved
                }
                Poll::Ready(Err(e)) => Step::Failed(e),
            }
        })
    }
}

/// Relays between `a` and `b` until both directions are over or one fails; `to_a` is written
/// to `a` before anything read from `b`.
pub async fn relay<A, B>(a: &mut A, b: &mut B, to_a: Vec<u8>) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut a_to_b = Direction::default();
    let mut b_to_a = Direction::starting_with(to_a);
    std::future::poll_fn(|cx| {
        let forth = a_to_b.poll_move(cx, a, b)?;
        let back = b_to_a.poll_move(cx, b, a)?;
        if forth.is_ready() && back.is_ready() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Runs a relay between two in-memory pipes of `capacity` bytes each; the outer ends.
    fn pair(
        capacity: usize,
        first: Vec<u8>,
    ) -> (
        tokio::io::DuplexStream,
        tokio::io::DuplexStream,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        let (client, mut a) = tokio::io::duplex(capacity);
        let (server, mut b) = tokio::io::duplex(capacity);
        let task = tokio::spawn(async move { relay(&mut a, &mut b, first).await });
        (client, server, task)
    }

    #[tokio::test]
    async fn bytes_go_both_ways_the_first_bytes_first_and_half_closes_are_carried() {
        let (mut client, mut server, task) = pair(64, b"hello".to_vec());
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        server.write_all(b"pong").await.unwrap();
        let mut got = [0u8; 9];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hellopong");
        // The client is done sending: the server sees the end and can still answer.
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        server.write_all(b"bye").await.unwrap();
        server.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"bye");
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_slow_reader_is_held_for_and_the_buffer_freed_once_written() {
        // Polled by hand here, outside tokio's cooperative budget (which would make the pipes
        // answer `Pending` to a waker nobody listens to).
        tokio::task::unconstrained(slow_reader()).await;
    }

    async fn slow_reader() {
        // A destination that takes 100 bytes at a time: most of a 10 KB read is held.
        let (mut a, mut a_inner) = tokio::io::duplex(100);
        let (mut b_inner, mut b) = tokio::io::duplex(100_000);
        let mut d = Direction::default();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        b.write_all(&data).await.unwrap();
        assert!(d
            .poll_move(&mut cx, &mut b_inner, &mut a_inner)
            .is_pending());
        assert!(d.holds_a_buffer() && d.held() > 0, "held {}", d.held());
        let mut got = Vec::new();
        let mut chunk = [0u8; 1000];
        while got.len() < data.len() {
            let n = a.read(&mut chunk).await.unwrap();
            got.extend_from_slice(&chunk[..n]);
            let _ = d.poll_move(&mut cx, &mut b_inner, &mut a_inner);
        }
        assert_eq!(got, data);
        assert_eq!(d.held(), 0);
        assert!(!d.holds_a_buffer(), "a quiet direction holds no buffer");
    }

    #[tokio::test]
    async fn a_failed_write_ends_the_relay_with_the_error() {
        let (mut client, server, task) = pair(64, Vec::new());
        drop(server);
        let _ = client.write_all(b"into nothing").await;
        assert!(task.await.unwrap().is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        #[test]
        fn whatever_is_sent_arrives_whole_and_in_order(
            up in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000), 0..12),
            down in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000), 0..12),
            first in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100),
            capacity in 1usize..5000,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let (client, server, task) = pair(capacity, first.clone());
                let (mut cr, mut cw) = tokio::io::split(client);
                let (mut sr, mut sw) = tokio::io::split(server);
                let up_all: Vec<u8> = up.concat();
                let down_all: Vec<u8> = [first.clone(), down.concat()].concat();
                let send_up = tokio::spawn(async move {
                    for c in up { cw.write_all(&c).await.unwrap(); }
                    cw.shutdown().await.unwrap();
                });
                let send_down = tokio::spawn(async move {
                    for c in down { sw.write_all(&c).await.unwrap(); }
                    sw.shutdown().await.unwrap();
                });
                let mut at_server = Vec::new();
                let mut at_client = Vec::new();
                let (r1, r2) = tokio::join!(sr.read_to_end(&mut at_server), cr.read_to_end(&mut at_client));
                r1.unwrap();
                r2.unwrap();
                send_up.await.unwrap();
                send_down.await.unwrap();
                task.await.unwrap().unwrap();
                assert_eq!(at_server, up_all);
                assert_eq!(at_client, down_all);
            });
        }
    }
}
