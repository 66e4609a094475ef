//! The link-rate congestion controller: a sans-IO core and its quinn adapter.
//!
//! This module owns the decision of how many bytes the tunnel may have in flight towards one
//! peer. It does not send, time or pace anything itself: quinn does that from [`Core::window`]
//! (its pacer releases a window per smoothed RTT × 5/4, RFC 9002 §7.7).
//!
//! ## Algorithm
//! The appliance is told the rate of the WAN link it sits on, so it does not need to *find* the
//! rate the way Reno, CUBIC or BBR do. The controller keeps one number, the **share** of the
//! configured rate it claims (1.0 = the whole link), and derives the window from it:
//!
//! ```text
//! window = max(4 × MTU, rate × share × (base_rtt × window_gain + ack_allowance) + 2 × MTU)
//! base_rtt = minimum RTT seen (the initial RTT estimate before the first sample)
//! ```
//!
//! - **No slow start**: the first window is already `rate × initial_rtt × gain`.
//! - **Pacing at the rate**: the window is a bandwidth-delay product of the *minimum* RTT, so
//!   `window / RTT` is `rate × share × gain` on an empty queue and falls to `rate × share` once
//!   our own standing queue is `(gain − 1) × base_rtt`; the small `gain` (default 1.15) covers
//!   the acknowledgement delay and the packets that are lost but not yet declared lost.
//! - **An ACK allowance**: [`Config::ack_allowance`] (default 2 ms) is added to the RTT the
//!   window covers. Acknowledgements come late by the receiver's scheduling and ACK timing, a
//!   delay that does not shrink with the path: on a LAN-like link (0.1–0.2 ms base RTT) a
//!   window of `rate × base_rtt × gain` stalled the sender whenever the peer's CPU was busy
//!   (the appliance pair moved 0.6–0.9 Gbit/s with a fifth of the CPU idle). On a WAN the
//!   allowance is a few per cent of the window, far below the queueing-delay threshold.
//!   Two more packets cover the receiver acknowledging every second packet: on a slow link
//!   (16 ms for two packets at 1.5 Mbit/s) that wait ate most of a short path's headroom, and
//!   at 5 % loss, with lost packets counted in flight until declared lost, the window, not
//!   the rate, bounded the transfer (90 ms: 0.95 of the target goodput, 200 ms: 1.02).
//! - **Random loss is not congestion**: loss is counted over *epochs* of at least one RTT and
//!   [`Config::loss_epoch_packets`] packets; only an epoch whose lost fraction exceeds
//!   [`Config::loss_threshold`] (default 20 %, far above the 1–5 % random loss of a bad WAN)
//!   counts as clustered loss and multiplies the share by [`Config::decrease_factor`].
//! - **Queueing delay is congestion**: when the smallest RTT sample of a round trip (one
//!   smoothed RTT of acknowledgements) exceeds the base RTT by more than
//!   `max(queue_delay_floor, queue_delay_fraction × base_rtt, 6 packets at the rate)`, somebody
//!   else is filling the bottleneck queue (or the configured rate is too high), and the share
//!   is multiplied by [`Config::decrease_factor`] at most once per RTT, down to
//!   [`Config::min_share`] (the fair share against one competing flow by default), so other
//!   traffic is not crushed. The round's minimum rather than the smoothed RTT: a queue delays
//!   every packet of the round, while a stall of either host — a descheduled process on a
//!   busy or oversubscribed machine — delays only the acknowledgements it held up, and judged
//!   on the smoothed RTT such stalls cost a 44 Mbit/s transfer three decreases at 0 % loss
//!   (pdf_large, 90 ms: 4.07 s instead of 3.43 s, on a VM with 12–33 % steal time).
//!   Queueing delay is not judged for the first two base RTTs after the first acknowledgement:
//!   the first window goes out at 5/4 of the rate (quinn's pacer) and builds a one-off queue.
//!   Nor is it judged before [`BUSY_PACKETS`] packets (at most half a window) were
//!   acknowledged in the current round trip: a connection that carries only keep-alives
//!   cannot be filling a queue, and its smoothed RTT, fed a sample now and then, still
//!   carries the handshake's (the processes' start-up: 160–170 ms on a 90 ms path). Judged
//!   anyway, such an idle connection of an appliance pair fell to half its share before its
//!   first flow.
//! - **Recovery**: once a round's queueing delay is below half that threshold, the share grows by
//!   [`Config::recovery_step`] per RTT back to 1.0.
//! - **Persistent congestion** (RFC 9002 §7.6: every packet over a period longer than the PTO
//!   lost) drops the share straight to `min_share`; it recovers like above.
//! - An **ECN congestion experienced** mark is treated like queueing delay (explicit evidence of a
//!   queue), at most one decrease per RTT.
//!
//! Known limit: the base RTT is the lifetime minimum, as quinn reports it, so after a route change
//! to a *longer* path the controller sees a permanent queue and stays at `min_share` until the
//! connection is re-established.
//!
//! ## Call order
//! [`Core::new`], then in any order as events happen, with non-decreasing `now`:
//! [`Core::handle_ack`] per acknowledged packet, [`Core::handle_loss`] per batch of lost packets,
//! [`Core::handle_ecn`] per ECN CE increase, [`Core::handle_mtu`] when the path MTU changes; read
//! [`Core::window`] and [`Core::pacing_rate`] whenever needed.
//!
//! ## Invariants
//! `min_share ≤ share ≤ 1`, and `window ≥ 4 × MTU` at all times.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_core::Rate;
use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};

/// The smallest window, in packets, whatever the rate and RTT (RFC 9002 §7.2 uses 2; 4 keeps the
/// loss-detection packet threshold of 3 working on tiny links).
const MIN_WINDOW_PACKETS: u64 = 4;

/// Packets of queue, at the link rate, that never count as congestion by themselves (see
/// `Core::queue_threshold`).
const QUEUE_PACKETS: u64 = 6;

/// Base RTTs after the first acknowledgement during which queueing delay is not judged: the
/// first window goes out paced at 5/4 of the rate, which builds a one-off queue of about
/// `(5/4 − 1) × window`.
const STARTUP_GRACE_RTTS: u32 = 2;

/// Packets that must have been acknowledged in the current round trip (at most half the
/// window) before its queueing delay is judged (module doc).
pub const BUSY_PACKETS: u64 = 32;

/// Tuning of the controller. [`Config::new`] gives the documented defaults for a link rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The configured WAN link rate this peer may use.
    pub rate: Rate,
    /// RTT estimate used for the first window, before any sample (default 100 ms).
    pub initial_rtt: Duration,
    /// Headroom of the window over the bandwidth-delay product (default 1.15, range 1.0–4.0).
    pub window_gain: f64,
    /// Time added to the RTT the window covers, for late acknowledgements (default 2 ms, at
    /// most 100 ms).
    pub ack_allowance: Duration,
    /// Smallest queueing delay that counts as congestion (default 20 ms).
    pub queue_delay_floor: Duration,
    /// Queueing delay, as a fraction of the base RTT, that counts as congestion (default 0.3).
    pub queue_delay_fraction: f64,
    /// Factor applied to the share on congestion (default 0.85, range (0, 1)).
    pub decrease_factor: f64,
    /// Lowest share congestion may push the controller to (default 0.5, range (0, 1]).
    pub min_share: f64,
    /// Share regained per RTT once the queue has drained (default 0.1, range (0, 1]).
    pub recovery_step: f64,
    /// Lost fraction of an epoch's bytes above which loss is clustered (default 0.2, range
    /// (0, 1)).
    pub loss_threshold: f64,
    /// Packets (acked + lost, in MTUs) an epoch needs before it is judged (default 64, ≥ 1).
    pub loss_epoch_packets: u64,
}

/// Why a [`Config`] was refused by [`Core::new`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The link rate is zero.
    #[error("link rate must be above zero")]
    ZeroRate,
    /// The initial RTT estimate is zero.
    #[error("initial rtt must be above zero")]
    ZeroRtt,
    /// A tuning factor is outside its documented range (the field name is given).
    #[error("{0} is out of range")]
    OutOfRange(&'static str),
}

impl Config {
    /// The defaults documented on each field, for a link of `rate`.
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            initial_rtt: Duration::from_millis(100),
            window_gain: 1.15,
            ack_allowance: Duration::from_millis(2),
            queue_delay_floor: Duration::from_millis(20),
            queue_delay_fraction: 0.3,
            decrease_factor: 0.85,
            min_share: 0.5,
            recovery_step: 0.1,
            loss_threshold: 0.2,
            loss_epoch_packets: 64,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        fn open01(v: f64) -> bool {
            v > 0.0 && v < 1.0
        }
        if self.rate.bps() == 0 {
            return Err(ConfigError::ZeroRate);
        }
        if self.initial_rtt.is_zero() {
            return Err(ConfigError::ZeroRtt);
        }
        if !(1.0..=4.0).contains(&self.window_gain) {
            return Err(ConfigError::OutOfRange("window_gain"));
        }
        if self.ack_allowance > Duration::from_millis(100) {
            return Err(ConfigError::OutOfRange("ack_allowance"));
        }
        if !(0.0..=1.0).contains(&self.queue_delay_fraction) {
            return Err(ConfigError::OutOfRange("queue_delay_fraction"));
        }
        if !open01(self.decrease_factor) {
            return Err(ConfigError::OutOfRange("decrease_factor"));
        }
        if !(self.min_share > 0.0 && self.min_share <= 1.0) {
            return Err(ConfigError::OutOfRange("min_share"));
        }
        if !(self.recovery_step > 0.0 && self.recovery_step <= 1.0) {
            return Err(ConfigError::OutOfRange("recovery_step"));
        }
        if !open01(self.loss_threshold) {
            return Err(ConfigError::OutOfRange("loss_threshold"));
        }
        if self.loss_epoch_packets == 0 {
            return Err(ConfigError::OutOfRange("loss_epoch_packets"));
        }
        Ok(())
    }
}

/// RTT figures that come with an acknowledgement (quinn's `RttEstimator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttSample {
    /// Smoothed RTT (RFC 9002 §5.3).
    pub smoothed: Duration,
    /// Minimum RTT over the connection's lifetime (RFC 9002 §5.2).
    pub min: Duration,
    /// This acknowledgement's own sample: from the packet's send to its acknowledgement
    /// (the peer's acknowledgement delay included).
    pub latest: Duration,
}

/// Counters of the controller's decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes reported lost (all of them, clustered or not).
    pub lost_bytes: u64,
    /// Loss epochs judged random (lost fraction under the threshold, but not zero).
    pub ignored_loss_epochs: u64,
    /// Decreases caused by clustered loss.
    pub loss_decreases: u64,
    /// Decreases caused by queueing delay or ECN marks.
    pub delay_decreases: u64,
    /// Persistent-congestion events.
    pub persistent_congestion: u64,
    /// Recovery steps taken after a queue drained.
    pub recoveries: u64,
}

impl Stats {
    /// Adds `other`'s counts to these (an endpoint sums its connections').
    pub fn add(&mut self, other: &Stats) {
        self.lost_bytes = self.lost_bytes.saturating_add(other.lost_bytes);
        self.ignored_loss_epochs = self
            .ignored_loss_epochs
            .saturating_add(other.ignored_loss_epochs);
        self.loss_decreases = self.loss_decreases.saturating_add(other.loss_decreases);
        self.delay_decreases = self.delay_decreases.saturating_add(other.delay_decreases);
        self.persistent_congestion = self
            .persistent_congestion
            .saturating_add(other.persistent_congestion);
        self.recoveries = self.recoveries.saturating_add(other.recoveries);
    }

    /// The decisions of the controller `conn` runs, if it is this module's (a connection
    /// configured elsewhere reports nothing).
    pub fn of(conn: &quinn::Connection) -> Stats {
        conn.congestion_state()
            .into_any()
            .downcast::<LinkRateController>()
            .map(|c| c.core().stats())
            .unwrap_or_default()
    }
}

/// The sans-IO decision core (see the module doc for the algorithm).
#[derive(Debug, Clone)]
pub struct Core {
    config: Config,
    mtu: u64,
    share: f64,
    smoothed_rtt: Option<Duration>,
    min_rtt: Option<Duration>,
    last_adjust: Option<Instant>,
    first_ack: Option<Instant>,
    epoch_start: Instant,
    epoch_acked: u64,
    epoch_lost: u64,
    /// When the current round trip (for [`BUSY_PACKETS`]) began.
    round_start: Instant,
    /// Bytes acknowledged since `round_start`.
    round_acked: u64,
    /// The smallest RTT sample since `round_start`: what queueing delay is judged on.
    round_min: Option<Duration>,
    stats: Stats,
}

impl Core {
    /// A controller claiming the whole configured rate, for a path of `mtu` bytes.
    pub fn new(config: Config, now: Instant, mtu: u16) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self::from_valid(config, now, mtu))
    }

    /// [`Core::new`] for a config already validated.
    fn from_valid(config: Config, now: Instant, mtu: u16) -> Self {
        Self {
            config,
            mtu: u64::from(mtu.max(1)),
            share: 1.0,
            smoothed_rtt: None,
            min_rtt: None,
            last_adjust: None,
            first_ack: None,
            epoch_start: now,
            epoch_acked: 0,
            epoch_lost: 0,
            round_start: now,
            round_acked: 0,
            round_min: None,
            stats: Stats::default(),
        }
    }

    /// `bytes` of one packet sent at some earlier time were acknowledged at `now`.
    pub fn handle_ack(&mut self, now: Instant, bytes: u64, rtt: RttSample) {
        self.smoothed_rtt = Some(rtt.smoothed);
        let min = rtt.min.min(rtt.smoothed);
        self.min_rtt = Some(self.min_rtt.map_or(min, |m| m.min(min)));
        self.epoch_acked = self.epoch_acked.saturating_add(bytes);
        self.judge_epoch(now);
        self.first_ack.get_or_insert(now);
        if now.saturating_duration_since(self.round_start) >= self.rtt() {
            self.judge_round(now);
            self.round_start = now;
            self.round_acked = 0;
            self.round_min = None;
        }
        self.round_acked = self.round_acked.saturating_add(bytes);
        self.round_min = Some(self.round_min.map_or(rtt.latest, |m| m.min(rtt.latest)));
    }

    /// Judges the round trip that just ended by its smallest RTT sample: a competing flow's
    /// queue delays every packet of the round, while a stall of either host (a descheduled
    /// process, a busy core) delays only the acknowledgements it held up.
    fn judge_round(&mut self, now: Instant) {
        let Some(round_min) = self.round_min else {
            return;
        };
        let base = self.base_rtt();
        let queue = round_min.saturating_sub(base);
        let threshold = self.queue_threshold(base);
        let first_ack = self.first_ack.unwrap_or(now);
        let started = now.saturating_duration_since(first_ack) >= base * STARTUP_GRACE_RTTS;
        let busy = self.round_acked >= (BUSY_PACKETS * self.mtu).min(self.window() / 2);
        if queue > threshold && started && busy {
            self.decrease_once_per_rtt(now, Cause::Delay);
        } else if queue < threshold / 2 && self.share < 1.0 && self.rtt_elapsed(now) {
            self.share = (self.share + self.config.recovery_step).min(1.0);
            self.last_adjust = Some(now);
            self.stats.recoveries += 1;
        }
    }

    /// `lost_bytes` were declared lost at `now`; `persistent` if RFC 9002 §7.6 persistent
    /// congestion was established.
    pub fn handle_loss(&mut self, now: Instant, lost_bytes: u64, persistent: bool) {
        self.stats.lost_bytes = self.stats.lost_bytes.saturating_add(lost_bytes);
        if persistent {
            self.share = self.config.min_share;
            self.last_adjust = Some(now);
            self.stats.persistent_congestion += 1;
            self.reset_epoch(now);
            return;
        }
        self.epoch_lost = self.epoch_lost.saturating_add(lost_bytes);
        self.judge_epoch(now);
    }

    /// The peer reported more ECN congestion-experienced marks at `now`.
    pub fn handle_ecn(&mut self, now: Instant) {
        self.decrease_once_per_rtt(now, Cause::Delay);
    }

    /// The path MTU is now `mtu` bytes.
    pub fn handle_mtu(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu.max(1));
    }

    /// Bytes that may be in flight now.
    pub fn window(&self) -> u64 {
        let covered = self.base_rtt().as_secs_f64() * self.config.window_gain
            + self.config.ack_allowance.as_secs_f64();
        let bdp = self.config.rate.bytes_per_sec() * self.share * covered;
        // `as` saturates for f64 → u64, and bdp is never negative or NaN (validated inputs).
        (bdp as u64 + 2 * self.mtu).max(MIN_WINDOW_PACKETS * self.mtu)
    }

    /// The rate this controller currently claims (configured rate × share).
    pub fn pacing_rate(&self) -> Rate {
        Rate::from_bps((self.config.rate.bps() as f64 * self.share) as u64)
    }

    /// The fraction of the configured rate currently claimed, in `[min_share, 1]`.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// The configuration this core runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Decision counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    fn base_rtt(&self) -> Duration {
        self.min_rtt.unwrap_or(self.config.initial_rtt)
    }

    fn rtt(&self) -> Duration {
        self.smoothed_rtt.unwrap_or(self.config.initial_rtt)
    }

    fn queue_threshold(&self, base: Duration) -> Duration {
        // On a slow link a few packets queued by pacing jitter or retransmissions are already
        // tens of milliseconds (1500 bytes take 8 ms at 1.5 Mbit/s): that is not a competing
        // flow, so the threshold is never below the serialization time of a few packets.
        let packets = self
            .config
            .rate
            .transmit_time(QUEUE_PACKETS * self.mtu)
            .unwrap_or_default();
        self.config
            .queue_delay_floor
            .max(base.mul_f64(self.config.queue_delay_fraction))
            .max(packets)
    }

    fn rtt_elapsed(&self, now: Instant) -> bool {
        self.last_adjust
            .is_none_or(|t| now.saturating_duration_since(t) >= self.rtt())
    }

    fn decrease_once_per_rtt(&mut self, now: Instant, cause: Cause) {
        if !self.rtt_elapsed(now) {
            return;
        }
        self.decrease(now, cause);
    }

    fn decrease(&mut self, now: Instant, cause: Cause) {
        self.share = (self.share * self.config.decrease_factor).max(self.config.min_share);
        self.last_adjust = Some(now);
        match cause {
            Cause::Delay => self.stats.delay_decreases += 1,
            Cause::Loss => self.stats.loss_decreases += 1,
        }
    }

    fn judge_epoch(&mut self, now: Instant) {
        let total = self.epoch_acked.saturating_add(self.epoch_lost);
        if now.saturating_duration_since(self.epoch_start) < self.rtt()
            || total < self.config.loss_epoch_packets.saturating_mul(self.mtu)
        {
            return;
        }
        let lost_fraction = self.epoch_lost as f64 / total as f64;
        if lost_fraction > self.config.loss_threshold {
            self.decrease(now, Cause::Loss);
        } else if self.epoch_lost > 0 {
            self.stats.ignored_loss_epochs += 1;
        }
        self.reset_epoch(now);
    }

    fn reset_epoch(&mut self, now: Instant) {
        self.epoch_start = now;
        self.epoch_acked = 0;
        self.epoch_lost = 0;
    }
}

#[derive(Debug, Clone, Copy)]
enum Cause {
    Delay,
    Loss,
}

/// Builds a [`LinkRateController`] for each new quinn connection path.
#[derive(Debug, Clone)]
pub struct LinkRateFactory {
    config: Config,
}

impl LinkRateFactory {
    /// A factory for controllers with `config`, validated here once.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self { config })
    }
}

impl ControllerFactory for LinkRateFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        // The config was validated in `LinkRateFactory::new`.
        let core = Core::from_valid(self.config.clone(), now, current_mtu);
        Box::new(LinkRateController { core })
    }
}

/// The thin quinn adapter around [`Core`]: it translates quinn's callbacks and makes no
/// decisions of its own.
#[derive(Debug, Clone)]
pub struct LinkRateController {
    core: Core,
}

impl LinkRateController {
    /// The decision core, for inspection.
    pub fn core(&self) -> &Core {
        &self.core
    }
}

impl Controller for LinkRateController {
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        _app_limited: bool,
        rtt: &quinn_proto::RttEstimator,
    ) {
        let sample = RttSample {
            smoothed: rtt.get(),
            min: rtt.min(),
            latest: now.saturating_duration_since(sent),
        };
        self.core.handle_ack(now, bytes, sample);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        _sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        // quinn reports an ECN CE increase as a congestion event with zero lost bytes.
        if lost_bytes == 0 && !is_persistent_congestion {
            self.core.handle_ecn(now);
        } else {
            self.core
                .handle_loss(now, lost_bytes, is_persistent_congestion);
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.core.handle_mtu(new_mtu);
    }

    fn window(&self) -> u64 {
        self.core.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.core.window();
        m.pacing_rate = Some(self.core.pacing_rate().bps());
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.core.window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests;
