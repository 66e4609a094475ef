//! Headway's platform layer: the one crate that talks to Linux below the standard library.
//!
//! Everything that needs `unsafe` lives here, behind small safe types, so that every other crate
//! can keep `#![forbid(unsafe_code)]` (STYLE.md rule 2). Every `unsafe` block carries a
//! `// SAFETY:` comment, and clippy's `undocumented_unsafe_blocks` is an error in this crate.
//!
//! What it owns:
//!
//! - [`packet`]: AF_PACKET raw sockets bound to one interface — a promiscuous receive socket
//!   that ignores our own transmissions, read in batches with `recvmmsg`, and a send-only socket
//!   written with `sendmmsg`.
//! - [`timer`]: precise waiting — `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` and `ppoll`
//!   with 1 ns timer slack, finished by a short spin whose length adapts to the wake-up latency
//!   measured on this machine.
//! - [`memory`]: process-wide memory settings (transparent huge pages off for the WAN
//!   optimizer).
//! - [`iface`]: interface lookups (index, MTU) in the calling thread's network namespace.
//! - [`offload`]: switching off segmentation, receive coalescing and checksum offloads through
//!   the `SIOCETHTOOL` ioctl (no `ethtool` binary needed), so frames are real ≤ MTU packets.
//! - [`sched`]: a scheduler hint (a short EEVDF time slice) for threads that must wake on time.
//! - [`netns`]: moving the calling thread into a named network namespace (`/run/netns/NAME`).
//! - [`transparent`]: `IP_TRANSPARENT` listeners for TPROXY interception.
//! - [`splice`]: zero-copy socket-to-socket moves through a pipe (the ADC's L4 path).
//! - [`stream`]: a non-blocking socket read into an uninitialised buffer (the ADC's client
//!   sockets before they are registered with the reactor).
//! - [`tcp`]: the TCP options `socket2` lacks (minimum RTO, delayed-ACK ceiling, window clamp),
//!   for the ADC's TCP profiles.
//! - [`raw`]: raw IPv4 sockets that send whole packets (the lab's SYN flooder).
//! - [`buffers`]: socket buffer sizes forced past the sysctl caps where the process may (the
//!   tunnel's UDP socket).
//! - [`fds`]: duplicates of this process's own socket descriptors, to read their options.
//! - [`simd`]: CPU-specific kernels — sixteen (AVX-512) or eight (AVX2) independent BLAKE3
//!   compressions side by side in vector registers, for the dedup codec's fingerprints.
//!
//! What it does not do: decide anything. It has no link model, no threads of its own and no
//! policy; `headway-emulator` is its main user.
//!
//! Everything here is Linux-only and works on the calling thread's network namespace at the time
//! of the call: a socket stays bound to the namespace it was created in.

pub mod buffers;
pub mod fds;
pub mod iface;
pub mod memory;
pub mod netns;
pub mod offload;
pub mod packet;
pub mod raw;
pub mod sched;
pub mod simd;
pub mod splice;
pub mod stream;
pub mod tcp;
pub mod timer;
pub mod transparent;

mod sys;

pub use iface::InterfaceError;
pub use netns::{NetnsError, NetnsGuard};
pub use offload::OffloadError;
pub use packet::{OpenError, RecvSocket, SendSocket};
pub use timer::{sleep_until, Sleeper, Wake};
pub use transparent::transparent_listener;
