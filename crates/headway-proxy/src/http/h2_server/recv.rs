//! An HTTP/2 client's request body: the data and trailers the connection's task
//! ([`super::H2Conn`]) puts in its queue as they arrive, read by the request's handling.
//!
//! The body and the connection's task share one [`Shared`] per connection: the queues of the
//! bodies being read, and the notices the bodies leave for the task — data consumed (its
//! flow-control window to give back), data first asked for (an `Expect: 100-continue` is
//! answered then), a body dropped before its end. The lock is held only to move a chunk or a
//! notice; the task takes the notices after each of its passes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use headway_h2::frame::Reason;
use headway_h2::stream_map::StreamMap;
use http::HeaderMap;
use hyper::body::Frame;

/// What a connection's task and its bodies share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    inner: parking_lot::Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The queue of each body still read, by stream.
    queues: StreamMap<Queue>,
    /// What the bodies did since the task last looked.
    notices: Vec<Notice>,
    /// The connection's task, woken by a notice.
    task: Option<Waker>,
}

/// A body's data as it arrived, not yet read.
#[derive(Debug, Default)]
struct Queue {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    /// Nothing more comes (after the chunks and trailers).
    end: bool,
    /// The stream was reset.
    reset: Option<Reason>,
    /// The reader, waiting for more.
    reader: Option<Waker>,
}

/// What a body did, for the connection's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    /// It consumed this many bytes of data.
    Consumed(u32, usize),
    /// Its data was asked for the first time.
    Asked(u32),
    /// It was dropped before its end (its queue is gone; the bytes it held were consumed).
    Dropped(u32),
}

impl Shared {
    /// Opens the queue of stream `id`'s body.
    pub(crate) fn open(&self, id: u32) {
        self.inner.lock().queues.insert(id, Queue::default());
    }

    /// Hands `data` (and the body's end, when `end`) to stream `id`'s body; `false` when its
    /// body is gone (the data is the task's to give back).
    pub(crate) fn data(&self, id: u32, data: Bytes, end: bool) -> bool {
        let mut g = self.inner.lock();
        let Some(q) = g.queues.get_mut(&id) else {
            return false;
        };
        if !data.is_empty() {
            q.chunks.push_back(data);
        }
        q.end |= end;
        if let Some(w) = q.reader.take() {
            w.wake();
        }
        true
    }

    /// Hands `trailers` to stream `id`'s body, which ends with them.
    pub(crate) fn trailers(&self, id: u32, trailers: HeaderMap) {
        let mut g = self.inner.lock();
        if let Some(q) = g.queues.get_mut(&id) {
            q.trailers = Some(trailers);
            q.end = true;
            if let Some(w) = q.reader.take() {
                w.wake();
            }
        }
    }

    /// Stream `id` was reset: its body fails, and the bytes it held are returned (to give
    /// back to the connection's window).
    pub(crate) fn reset(&self, id: u32, reason: Reason) -> usize {
        let mut g = self.inner.lock();
        let Some(q) = g.queues.get_mut(&id) else {
            return 0;
        };
        let held = q.chunks.drain(..).map(|c| c.len()).sum();
        q.reset = Some(reason);
        if let Some(w) = q.reader.take() {
            w.wake();
        }
        held
    }

    /// Takes the notices left since the last call into `into`, and keeps `task` to wake for
    /// the next ones.
    pub(crate) fn notices(&self, task: &Waker, into: &mut Vec<Notice>) {
        let mut g = self.inner.lock();
        if !g.task.as_ref().is_some_and(|w| w.will_wake(task)) {
            g.task = Some(task.clone());
        }
        into.append(&mut g.notices);
    }
}

impl Inner {
    fn notice(&mut self, n: Notice) {
        // Consumed bytes of one stream in a row are added up.
        if let (Notice::Consumed(id, more), Some(Notice::Consumed(last, n))) =
            (n, self.notices.last_mut())
        {
            if *last == id {
                *n += more;
                return;
            }
        }
        self.notices.push(n);
        if let Some(w) = &self.task {
            w.wake_by_ref();
        }
    }
}

/// A client's HTTP/2 request body (see the module doc).
#[derive(Debug)]
pub struct RecvBody {
    shared: Arc<Shared>,
    id: u32,
    /// The request's `Content-Length`, if it gave one (the connection checks the data
    /// against it).
    length: Option<u64>,
    /// Data bytes taken so far.
    taken: u64,
    asked: bool,
    /// Read to its end (or failed).
    done: bool,
}

impl RecvBody {
    /// The body of stream `id` (its queue opened with [`Shared::open`]) whose request's
    /// `Content-Length` is `length`.
    pub(crate) fn new(shared: Arc<Shared>, id: u32, length: Option<u64>) -> Self {
        RecvBody {
            shared,
            id,
            length,
            taken: 0,
            asked: false,
            done: false,
        }
    }

    /// The data bytes still to come, when the client said how many it sends.
    pub fn remaining(&self) -> Option<u64> {
        self.length.map(|n| n.saturating_sub(self.taken))
    }

    /// Whether nothing more (not even trailers) is to come.
    pub fn is_end_stream(&self) -> bool {
        if self.done {
            return true;
        }
        let g = self.shared.inner.lock();
        g.queues
            .get(&self.id)
            .is_none_or(|q| q.end && q.chunks.is_empty() && q.trailers.is_none())
    }

    /// The next frame: data, then the trailers; `None` at the end.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResetError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut g = self.shared.inner.lock();
        if !self.asked {
            self.asked = true;
            g.notice(Notice::Asked(self.id));
        }
        let Some(q) = g.queues.get_mut(&self.id) else {
            self.done = true;
            return Poll::Ready(None);
        };
        if let Some(c) = q.chunks.pop_front() {
            let n = c.len();
            g.notice(Notice::Consumed(self.id, n));
            self.taken += n as u64;
            return Poll::Ready(Some(Ok(Frame::data(c))));
        }
        if let Some(reason) = q.reset {
            self.done = true;
            g.queues.remove(&self.id);
            return Poll::Ready(Some(Err(ResetError(reason))));
        }
        if let Some(t) = q.trailers.take() {
            self.done = true;
            g.queues.remove(&self.id);
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        if q.end {
            self.done = true;
            g.queues.remove(&self.id);
            return Poll::Ready(None);
        }
        if !q.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            q.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        let mut g = self.shared.inner.lock();
        let Some(q) = g.queues.remove(&self.id) else {
            return;
        };
        let held: usize = q.chunks.iter().map(Bytes::len).sum();
        if held > 0 {
            g.notice(Notice::Consumed(self.id, held));
        }
        // A body whose client still sends: the task decides what to do with the rest.
        if !q.end && q.reset.is_none() {
            g.notice(Notice::Dropped(self.id));
        }
    }
}

/// The client reset the stream of the body being read.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the client reset the HTTP/2 stream ({0})")]
pub struct ResetError(pub Reason);
