//! The sans-IO WAN link model.
//!
//! A [`Link`] models one direction of a WAN link. It owns no sockets, threads or clocks: the
//! caller hands it frames with [`Link::handle_packet`] and the current instant, and takes
//! frames back out with [`Link::poll_release`] when their time has come; [`Link::poll_timeout`]
//! says when to call again. The emulator (`headway-emulator`) drives it from AF_PACKET sockets
//! and a precise release thread; the simulator (`headway-sim`) drives it on a virtual clock.
//!
//! ## Model, in the order a frame meets it
//! 1. **MTU**: a frame longer than `mtu + 14` bytes is dropped (oversize).
//! 2. **Queue**: drop-tail in front of the serialiser, limited in packets and/or bytes; a frame
//!    that does not fit is dropped (overflow).
//! 3. **Serialisation** at `rate`: `departure = max(arrival, previous departure) +
//!    (len + overhead) / rate` on a virtual timeline, so the long-run rate is exact whatever the
//!    caller's timing error.
//! 4. **Loss** (Bernoulli or Gilbert–Elliott) decided after serialisation: a lost frame has still
//!    used its share of the rate, as on a real lossy line. (The decision is drawn when the frame
//!    arrives — nothing later can change it — so `handle_packet` says `Queued` and the frame is
//!    counted in [`Stats::lost`] right away; it simply never comes out of `poll_release`.)
//! 5. **Delay + jitter**: `release = departure + delay ± jitter`, but never before the previous
//!    frame's release (no reordering by jitter).
//! 6. **Reordering**: with its probability a frame is held back by `gap` and may be overtaken.
//! 7. **Duplication**: with its probability a second copy is released right after the first.
//!
//! ## Determinism
//! All randomness comes from the seed given to [`Link::new`]: the same seed and the same
//! sequence of calls give the same schedule. Loss, jitter, duplication and reordering draw from
//! separate streams, and every frame accepted by the queue takes its draws from each enabled
//! stream, so changing one of them does not shift the others' decisions.
//!
//! ## Cost
//! O(1) per frame (O(log n) for a frame held back by reordering), no allocation per frame beyond
//! the growth of the queues; all arithmetic on the timeline is in integer nanoseconds.
//!
//! ## Call order
//! `handle_packet` for each arriving frame (with a non-decreasing `now`), then `poll_release`
//! until it returns `None`, then sleep until `poll_timeout`. `set_params` may be called at any
//! time; frames already scheduled keep their schedule.
#![forbid(unsafe_code)]

mod link;
mod params;

pub use link::{Backlog, DropReason, Link, Release, Stats, Verdict};
pub use params::{
    Jitter, JitterDistribution, Loss, Params, ParamsError, QueueLimit, Reorder, ETHERNET_OVERHEAD,
};
