//! Headway's shared vocabulary.
//!
//! This crate owns the small types every other Headway crate speaks in:
//!
//! - [`units`]: typed quantities with the textual forms users write in config files and on the
//!   command line (`"1.5mbit"`, `"64MiB"`, `"300ms"`, `"1%"`), and their parsers;
//! - [`clock`]: the one sanctioned reader of the monotonic and wall clocks, and a manual clock for
//!   tests and simulations;
//! - [`rng`]: the seeded random number generator that every randomised core uses, so that the same
//!   seed always gives the same sequence.
//!
//! It does no I/O and has no async code. Everything here is `Send + Sync` where it makes sense.
#![forbid(unsafe_code)]

pub mod clock;
pub mod net;
pub mod rng;
pub mod units;

pub use clock::{Clock, ManualClock, SystemClock};
pub use rng::Rng;
pub use units::{ByteSize, Probability, Rate, UnitError};
