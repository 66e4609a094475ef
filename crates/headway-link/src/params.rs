//! Validated parameters of one link direction.
//!
//! These are runtime types: every value here has been checked (by [`Params::validate`], called
//! from the config layer's `TryFrom`). The textual/TOML form lives in `headway-config`.

use std::time::Duration;

use headway_core::{Probability, Rate};

/// Bytes Ethernet adds on the wire beyond the frame the host sees: preamble and start delimiter
/// (8), frame check sequence (4) and inter-frame gap (12).
pub const ETHERNET_OVERHEAD: u32 = 24;

/// Parameters of one direction of an emulated link.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Serialisation rate; `None` means no rate limit (frames only get delay, jitter, loss).
    pub rate: Option<Rate>,
    /// Extra bytes counted per frame when computing serialisation time (0, or
    /// [`ETHERNET_OVERHEAD`] to count Ethernet framing as a real wire would).
    pub overhead: u32,
    /// One-way propagation delay added after serialisation.
    pub delay: Duration,
    /// Random variation of the delay.
    pub jitter: Jitter,
    /// Which frames are lost (applied after the rate limiter: lost frames still use bandwidth).
    pub loss: Loss,
    /// Probability that a frame is delivered twice.
    pub duplicate: Probability,
    /// Deliberate reordering.
    pub reorder: Reorder,
    /// Drop-tail queue limit in front of the serialiser.
    pub queue: QueueLimit,
    /// Largest L3 packet (frame length minus the 14-byte Ethernet header) that passes; larger
    /// frames are dropped and counted as oversize.
    pub mtu: u32,
}

impl Default for Params {
    /// A transparent link: no rate limit, no delay, no loss, 1000-packet queue, MTU 1500.
    fn default() -> Self {
        Params {
            rate: None,
            overhead: 0,
            delay: Duration::ZERO,
            jitter: Jitter::default(),
            loss: Loss::None,
            duplicate: Probability::ZERO,
            reorder: Reorder::default(),
            queue: QueueLimit::default(),
            mtu: 1500,
        }
    }
}

/// Delay variation.
///
/// Without [`Reorder`], jitter never reorders frames: a frame whose jittered release time would
/// fall before its predecessor's is released right after the predecessor (as Linktropy does and
/// as real paths mostly do).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Jitter {
    /// Size of the variation: half-width of the uniform distribution, or standard deviation of
    /// the normal one. Zero disables jitter.
    pub amount: Duration,
    /// The distribution of the variation.
    pub distribution: JitterDistribution,
}

/// Shape of the delay variation. The varied delay is clamped at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JitterDistribution {
    /// Uniform in `[delay - amount, delay + amount]`.
    #[default]
    Uniform,
    /// Normal with mean `delay` and standard deviation `amount`.
    Normal,
}

/// Loss models.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Loss {
    /// No loss.
    #[default]
    None,
    /// Each frame is lost independently with this probability.
    Bernoulli(Probability),
    /// The two-state Gilbert–Elliott model: the link is Good or Bad; it moves Good→Bad with
    /// probability `p` and Bad→Good with probability `r` before each frame, and loses the frame
    /// with probability `loss_good` or `loss_bad` in the respective state. The stationary loss
    /// rate is `(r·loss_good + p·loss_bad) / (p + r)`; the mean Bad sojourn is `1/r` frames.
    GilbertElliott {
        /// Probability of moving from Good to Bad.
        p: Probability,
        /// Probability of moving from Bad to Good.
        r: Probability,
        /// Loss probability in the Good state (often 0).
        loss_good: Probability,
        /// Loss probability in the Bad state (often 1).
        loss_bad: Probability,
    },
}

impl Loss {
    /// The long-run fraction of frames this model loses.
    pub fn mean_rate(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Bernoulli(p) => p.value(),
            Loss::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                let (p, r) = (p.value(), r.value());
                if p + r == 0.0 {
                    loss_good.value()
                } else {
                    (r * loss_good.value() + p * loss_bad.value()) / (p + r)
                }
            }
        }
    }
}

/// Deliberate reordering: with `probability`, a frame is held back for an extra `gap` beyond its
/// normal release time, so frames behind it overtake it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reorder {
    /// Probability that a frame is held back.
    pub probability: Probability,
    /// How much longer a held-back frame waits.
    pub gap: Duration,
}

/// Drop-tail queue limits; a frame that would exceed either limit is dropped on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimit {
    /// Most frames waiting for the serialiser (including the one being serialised).
    pub packets: Option<u32>,
    /// Most bytes waiting for the serialiser.
    pub bytes: Option<u64>,
}

impl Default for QueueLimit {
    /// 1000 packets (Linux's default `txqueuelen`), no byte limit.
    fn default() -> Self {
        QueueLimit {
            packets: Some(1000),
            bytes: None,
        }
    }
}

/// Why a set of parameters is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsError {
    /// The MTU is outside 68..=65535.
    #[error("mtu {0} is out of range: use 68 to 65535 bytes")]
    Mtu(u32),
    /// The queue limit is zero.
    #[error(
        "queue limit of zero would drop every frame: use at least 1 packet / 1 byte, or no limit"
    )]
    ZeroQueue,
    /// The delay is above the model's maximum.
    #[error("delay {0:?} is above the maximum of 60 s")]
    Delay(Duration),
    /// The jitter is above the maximum.
    #[error("jitter {0:?} is above the maximum of 60 s")]
    Jitter(Duration),
    /// The rate is zero: nothing could ever be serialised (use no rate for an unlimited link).
    #[error("a rate of zero would never send a frame: give a positive rate, or none for no limit")]
    ZeroRate,
}

impl Params {
    /// Checks the combination of values; the config layer calls this in its `TryFrom`.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if !(68..=65535).contains(&self.mtu) {
            return Err(ParamsError::Mtu(self.mtu));
        }
        if self.queue.packets == Some(0) || self.queue.bytes == Some(0) {
            return Err(ParamsError::ZeroQueue);
        }
        if self.delay > Duration::from_secs(60) {
            return Err(ParamsError::Delay(self.delay));
        }
        if self.jitter.amount > Duration::from_secs(60) {
            return Err(ParamsError::Jitter(self.jitter.amount));
        }
        if self.rate.is_some_and(|r| r.bps() == 0) {
            return Err(ParamsError::ZeroRate);
        }
        Ok(())
    }
}
