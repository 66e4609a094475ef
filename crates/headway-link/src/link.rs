//! The link state machine. (API contract; implementation in progress.)

use std::time::{Duration, Instant};

use crate::Params;

/// One direction of an emulated link. See the crate docs for the model and call order.
#[derive(Debug)]
pub struct Link<T> {
    params: Params,
    _held: Vec<T>,
}

/// What happened to a frame handed to [`Link::handle_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The frame is scheduled (or lost after serialisation: loss is decided on release of the
    /// serialiser, and such a frame simply never comes out of `poll_release`).
    Queued,
    /// The frame was refused on arrival.
    Dropped(DropReason),
}

/// Why a frame did not pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// Lost by the loss model.
    Loss,
    /// The queue was full.
    QueueOverflow,
    /// Longer than the MTU allows.
    Oversize,
}

/// A frame whose time has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release<T> {
    /// The frame.
    pub packet: T,
    /// When the model wanted it released; the caller's lateness is `now - due`.
    pub due: Instant,
    /// Time it waited in the queue before its serialisation started.
    pub queueing: Duration,
    /// Whether this is the extra copy made by duplication.
    pub duplicate: bool,
    /// Whether this frame was deliberately held back by reordering.
    pub reordered: bool,
}

/// Counters of one link direction since it was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames handed in.
    pub received: u64,
    /// Bytes handed in.
    pub received_bytes: u64,
    /// Frames released (including duplicates).
    pub passed: u64,
    /// Bytes released (including duplicates).
    pub passed_bytes: u64,
    /// Frames dropped by the loss model.
    pub lost: u64,
    /// Frames dropped because the queue was full.
    pub overflow: u64,
    /// Frames dropped for exceeding the MTU.
    pub oversize: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Frames held back by reordering.
    pub reordered: u64,
}

impl<T: Clone> Link<T> {
    /// A link with these parameters whose randomness is fully determined by `seed`.
    pub fn new(params: Params, seed: u64) -> Self {
        let _ = seed;
        Link {
            params,
            _held: Vec::new(),
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Replaces the parameters; frames already scheduled keep their schedule, the next arriving
    /// frame sees the new ones.
    pub fn set_params(&mut self, params: Params, now: Instant) {
        let _ = now;
        self.params = params;
    }

    /// Hands in a frame of `len` bytes (the whole L2 frame as read from the interface) that
    /// arrived at `now`.
    pub fn handle_packet(&mut self, now: Instant, len: usize, packet: T) -> Verdict {
        let _ = (now, len, packet);
        todo!("headway-link implementation")
    }

    /// The next frame due at or before `now`, in release order; `None` when none is due.
    pub fn poll_release(&mut self, now: Instant) -> Option<Release<T>> {
        let _ = now;
        todo!("headway-link implementation")
    }

    /// When the next frame falls due; `None` when the link holds no frames.
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!("headway-link implementation")
    }

    /// Frames currently held (queued, in flight or waiting for release).
    pub fn len(&self) -> usize {
        self._held.len()
    }

    /// Whether the link holds no frames.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters since creation.
    pub fn stats(&self) -> &Stats {
        todo!("headway-link implementation")
    }
}
