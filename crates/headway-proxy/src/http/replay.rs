//! A request body sent to an HTTP/2 server from a copy of what was sent, so that a stream the
//! server did not take can be sent again from its first byte.
//!
//! A server that ends its connection with a graceful GOAWAY (NGINX after every 1,000 requests
//! by default) or refuses a stream (`REFUSED_STREAM`) has processed none of the streams it
//! turns away (RFC 9113 §6.8, §8.7), so they may go to another connection whatever their
//! method — but only with their whole body. The body streams to the server as the client sends
//! it; what has been taken from the client is kept here, up to [`KEEP_BYTES`], until the
//! server's answer shows the stream was taken ([`Replay::taken`]). Another attempt gets a new
//! reader ([`Replay::again`]) that sends what was kept and then goes on reading the client.
//!
//! Before this, bodies of up to 64 KiB with a known length were read whole before they were
//! sent, and larger ones could not be sent again: with NGINX's `keepalive_requests` 10, 300 KB
//! POSTs failed 502 at about one in 170. A stream turned away learns it within a round trip of
//! being opened, having sent at most the server's flow-control window (64 KiB for NGINX and
//! HAProxy), so even large uploads are resent; only a body whose kept part passed the bound
//! before its stream failed is not.
//!
//! Readers of one body are generations: each [`Replay::again`] starts a new one, and a reader
//! of an older one (the failed attempt's, still held by its task) gets an error instead of
//! taking data the current one would miss. Memory: at most [`KEEP_BYTES`] per request whose
//! answer head has not come (the kept data are the client's own buffers, shared, not copied).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Frame;

use super::body::{ReqBody, ReqBodyError};

/// The most data bytes kept for sending again; a body that passes it before its answer's head
/// comes is not sent again.
pub const KEEP_BYTES: usize = 1 << 20;

/// A reader of a request body that can be read again from its start (see the module doc).
#[derive(Debug)]
pub struct Replay<B = ReqBody> {
    shared: Arc<Mutex<Shared<B>>>,
    /// This reader's generation; only the newest reads.
    generation: u64,
    /// The data chunk this reader sends next (counted from the body's first).
    next: usize,
    /// Whether this reader has given out the trailers.
    trailers_sent: bool,
    /// The body's length, when the client said it.
    length: Option<u64>,
}

#[derive(Debug)]
struct Shared<B> {
    /// The client's body, read from where the newest reader got to.
    source: B,
    /// Copies of the data chunks taken from the client, from chunk `base` on.
    kept: Vec<Bytes>,
    /// The number of the first kept chunk.
    base: usize,
    /// Chunks taken from the client so far.
    taken: usize,
    /// Data bytes in `kept`.
    kept_bytes: usize,
    /// No more is kept: past [`KEEP_BYTES`], or the stream was taken.
    dropped: bool,
    /// The client's body ended (its trailers, if any, in `trailers`).
    ended: bool,
    trailers: Option<http::HeaderMap>,
    /// The client's body failed: it cannot be sent whole again.
    failed: bool,
    /// The generation of the newest reader, and its place (the chunk it sends next).
    generation: u64,
    sent: usize,
}

impl<B> Replay<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<ReqBodyError>,
{
    /// `source`, kept as it is read.
    pub fn new(source: B) -> Self {
        let length = source.size_hint().exact();
        Replay {
            shared: Arc::new(Mutex::new(Shared {
                source,
                kept: Vec::new(),
                base: 0,
                taken: 0,
                kept_bytes: 0,
                dropped: false,
                ended: false,
                trailers: None,
                failed: false,
                generation: 0,
                sent: 0,
            })),
            generation: 0,
            next: 0,
            trailers_sent: false,
            length,
        }
    }

    /// A reader from the body's first byte, which every older reader gives way to; `None`
    /// when what was already sent is no longer kept.
    pub fn again(&self) -> Option<Self> {
        let mut s = self.shared.lock().ok()?;
        if !s.whole() {
            return None;
        }
        s.generation += 1;
        s.sent = 0;
        Some(Replay {
            shared: self.shared.clone(),
            generation: s.generation,
            next: 0,
            trailers_sent: false,
            length: self.length,
        })
    }

    /// Whether another reader from the first byte can be had ([`Replay::again`]).
    pub fn resendable(&self) -> bool {
        self.shared.lock().is_ok_and(|s| s.whole())
    }

    /// The server took the stream: nothing more is kept, and what the newest reader has
    /// sent is let go.
    pub fn taken(&self) {
        let Ok(mut s) = self.shared.lock() else {
            return;
        };
        s.dropped = true;
        let sent = s.sent;
        s.release(sent);
    }

    /// The body's length, when the client said it.
    pub fn length(&self) -> Option<u64> {
        self.length
    }

    /// The next frame: the kept data, then the client's, then the trailers.
    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ReqBodyError>>> {
        let Ok(mut guard) = self.shared.lock() else {
            return Poll::Ready(Some(Err("the body's reader failed".into())));
        };
        let s = &mut *guard;
        if s.generation != self.generation {
            return Poll::Ready(Some(Err("the body is being sent again".into())));
        }
        if self.next < s.taken {
            let Some(d) = self.next.checked_sub(s.base).and_then(|i| s.kept.get(i)) else {
                return Poll::Ready(Some(Err("the body's start is no longer kept".into())));
            };
            self.next += 1;
            let d = d.clone();
            s.release(self.next);
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if s.ended {
            return Poll::Ready(match (&s.trailers, self.trailers_sent) {
                (Some(t), false) => {
                    self.trailers_sent = true;
                    Some(Ok(Frame::trailers(t.clone())))
                }
                _ => None,
            });
        }
        match std::pin::Pin::new(&mut s.source).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(d) => {
                    s.taken += 1;
                    self.next = s.taken;
                    if !s.dropped && s.kept_bytes + d.len() <= KEEP_BYTES {
                        s.kept_bytes += d.len();
                        s.kept.push(d.clone());
                    } else {
                        s.drop_kept();
                    }
                    s.release(self.next);
                    Poll::Ready(Some(Ok(Frame::data(d))))
                }
                Err(frame) => {
                    s.ended = true;
                    let t = frame.into_trailers().ok();
                    s.trailers = t.clone();
                    self.trailers_sent = true;
                    Poll::Ready(t.map(|t| Ok(Frame::trailers(t))))
                }
            },
            Poll::Ready(Some(Err(e))) => {
                s.failed = true;
                s.drop_kept();
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                s.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Whether nothing more is to come for this reader.
    pub fn is_end_stream(&self) -> bool {
        self.shared.lock().is_ok_and(|s| {
            s.generation == self.generation
                && self.next >= s.taken
                && s.ended
                && (s.trailers.is_none() || self.trailers_sent)
        }) || (self.length == Some(0))
    }
}

impl<B> Shared<B> {
    /// Whether everything taken from the client so far is kept.
    fn whole(&self) -> bool {
        !self.failed && self.base == 0
    }

    /// Keeps nothing from now on.
    fn drop_kept(&mut self) {
        self.dropped = true;
        self.kept.clear();
        self.kept_bytes = 0;
        self.base = self.taken;
    }

    /// The newest reader is at chunk `sent`: once no more is kept, the chunks before it are
    /// let go.
    fn release(&mut self, sent: usize) {
        self.sent = sent;
        if !self.dropped || sent <= self.base {
            return;
        }
        let n = (sent - self.base).min(self.kept.len());
        for d in self.kept.drain(..n) {
            self.kept_bytes -= d.len();
        }
        self.base += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;
    use http_body_util::StreamBody;

    type Source = StreamBody<stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, ReqBodyError>>>>;

    /// A client's body of `chunks` (then `trailers`, or an error when `fails`).
    fn source(chunks: &[&'static [u8]], trailers: bool, fails: bool) -> Source {
        let mut frames: Vec<Result<Frame<Bytes>, ReqBodyError>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        if trailers {
            let mut t = http::HeaderMap::new();
            t.insert("x-sum", http::HeaderValue::from_static("7"));
            frames.push(Ok(Frame::trailers(t)));
        }
        if fails {
            frames.push(Err("cut short".into()));
        }
        StreamBody::new(stream::iter(frames))
    }

    /// The next frame, as data bytes, trailers (`T:` and their `x-sum`), the end (`END`) or
    /// an error (`ERR`).
    fn next(r: &mut Replay<Source>) -> String {
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        match r.poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(f))) => match f.into_data() {
                Ok(d) => String::from_utf8_lossy(&d).into_owned(),
                Err(f) => format!(
                    "T:{}",
                    f.into_trailers().unwrap()["x-sum"].to_str().unwrap()
                ),
            },
            Poll::Ready(Some(Err(_))) => "ERR".into(),
            Poll::Ready(None) => "END".into(),
            Poll::Pending => "PENDING".into(),
        }
    }

    #[test]
    fn a_reader_again_sends_what_was_sent_then_the_rest_and_the_old_reader_stops() {
        let handle = Replay::new(source(&[b"ab", b"cd", b"ef"], true, false));
        let mut first = handle.again().unwrap();
        assert_eq!(
            (next(&mut first), next(&mut first)),
            ("ab".into(), "cd".into())
        );
        assert!(handle.resendable());
        let mut second = handle.again().unwrap();
        // The failed attempt's reader takes nothing the new one would miss.
        assert_eq!(next(&mut first), "ERR");
        let got: Vec<String> = (0..5).map(|_| next(&mut second)).collect();
        assert_eq!(got, ["ab", "cd", "ef", "T:7", "END"]);
        assert!(second.is_end_stream());
        // And once more, all of it from the copy (trailers included).
        let mut third = handle.again().unwrap();
        let got: Vec<String> = (0..5).map(|_| next(&mut third)).collect();
        assert_eq!(got, ["ab", "cd", "ef", "T:7", "END"]);
    }

    #[test]
    fn a_body_past_the_bound_or_failed_is_not_sent_again() {
        static BIG: [u8; KEEP_BYTES] = [b'x'; KEEP_BYTES];
        let handle = Replay::new(source(&[b"ab", &BIG, b"cd"], false, false));
        let mut r = handle.again().unwrap();
        assert_eq!(next(&mut r), "ab");
        assert!(handle.resendable());
        assert_eq!(next(&mut r).len(), KEEP_BYTES);
        // Past the bound: nothing kept, and no reader from the first byte.
        assert!(!handle.resendable());
        assert!(handle.again().is_none());
        assert_eq!(handle.shared.lock().unwrap().kept_bytes, 0);
        // The reader itself goes on.
        assert_eq!((next(&mut r), next(&mut r)), ("cd".into(), "END".into()));

        let handle = Replay::new(source(&[b"ab"], false, true));
        let mut r = handle.again().unwrap();
        assert_eq!((next(&mut r), next(&mut r)), ("ab".into(), "ERR".into()));
        assert!(!handle.resendable() && handle.again().is_none());
    }

    #[test]
    fn a_taken_stream_lets_go_of_what_was_sent_and_keeps_what_was_not() {
        let handle = Replay::new(source(&[b"ab", b"cd", b"ef", b"gh"], false, false));
        let mut r = handle.again().unwrap();
        assert_eq!((next(&mut r), next(&mut r)), ("ab".into(), "cd".into()));
        // Sent again from the copy, and taken halfway through it.
        let mut again = handle.again().unwrap();
        assert_eq!(next(&mut again), "ab");
        handle.taken();
        assert_eq!(
            handle.shared.lock().unwrap().kept_bytes,
            2,
            "only `cd` is still kept"
        );
        let got: Vec<String> = (0..4).map(|_| next(&mut again)).collect();
        assert_eq!(got, ["cd", "ef", "gh", "END"]);
        let s = handle.shared.lock().unwrap();
        assert_eq!((s.kept.len(), s.kept_bytes), (0, 0));
    }

    #[test]
    fn an_empty_body_with_a_length_ends_at_once() {
        let handle = Replay::new(http_body_util::Full::new(Bytes::new()));
        assert_eq!(handle.length(), Some(0));
        assert!(handle.again().unwrap().is_end_stream());
    }
}
