//! Headway's user-space WAN emulator: a dummynet-style bridge between two interfaces.
//!
//! The kernels Headway runs on have no netem qdisc, so link emulation happens here. In a middle
//! network namespace a [`Bridge`] reads every frame arriving on interface A (AF_PACKET,
//! promiscuous, ARP and everything else included), passes it through a `headway_link::Link` for
//! the A→B direction and writes it to interface B when the model releases it — and the same from
//! B to A with its own model. The interfaces need no addresses; the bridge is invisible to the
//! hosts on either side except for what the models do to their frames.
//!
//! ```text
//!  A ──recvmmsg──▶ pump a_to_b: Link ──sendmmsg──▶ B
//!  A ◀──sendmmsg── pump b_to_a: Link ◀──recvmmsg── B
//!                    ▲
//!   admin thread: BridgeHandle (params, set_params, stats, Prometheus collector)
//! ```
//!
//! What it owns: the two pump threads, their buffers, the per-direction stats (the model's
//! counters, send errors, queueing-delay and release-timing-error histograms) and their
//! Prometheus exposition. What it does not own: the model (`headway-link`), the sockets, timers
//! and offload switches (`headway-io`), the config file schema (`headway-config`), namespaces and
//! veth pairs (`headway-lab`, or whoever calls [`Bridge::start`]).
//!
//! Call order: [`Bridge::start`] in the network namespace that holds both interfaces (it
//! switches their offloads off, opens the sockets and starts the threads); then any number of
//! [`BridgeHandle`] calls from any thread; then [`Bridge::stop`] (or drop). Each pump loop is
//! described in the `pump` module: receive a batch → hand to the model → send what is due →
//! wait with nanosecond precision until readable or next due (never longer than 50 ms, so stop
//! is prompt).
//!
//! Invariants: frames leave in the order the model releases them; the model sees every frame
//! with the instant its batch was read; the timing error reported is `send instant - due` for
//! every frame handed to the kernel.
#![forbid(unsafe_code)]

mod bridge;
mod metrics;
mod pump;
mod stats;

pub use bridge::{
    Bridge, BridgeConfig, BridgeHandle, Direction, EmulateError, ParseDirectionError, SendMode,
    Tuning, TxPath,
};
pub use stats::{BridgeStats, DirectionStats, Summary};
