//! Counters and delay summaries a running bridge reports.
//!
//! The pump threads record into [`Histograms`] (queueing delay per released frame, release
//! timing error per frame handed to the kernel) and into atomic counters; [`BridgeStats`] is the
//! serialisable snapshot the admin API, the CLI and the lab read.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A snapshot of one bridge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BridgeStats {
    /// The bridge's name.
    pub name: String,
    /// Interface A.
    pub a: String,
    /// Interface B.
    pub b: String,
    /// Frames read on A and written to B.
    pub a_to_b: DirectionStats,
    /// Frames read on B and written to A.
    pub b_to_a: DirectionStats,
}

/// Counters and summaries of one direction since the bridge started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DirectionStats {
    /// The link model's own counters (received, passed, lost, overflow, oversize, duplicated,
    /// reordered, and bytes), flattened into this struct's JSON.
    #[serde(flatten)]
    pub link: headway_link::Stats,
    /// Frames held in the model right now (queued or in flight).
    pub in_flight: u64,
    /// Released frames the kernel refused to send (counted, then dropped).
    pub send_errors: u64,
    /// Frames longer than the receive buffer (offloads left on?), dropped before the model.
    pub truncated: u64,
    /// Frames the kernel dropped before we read them (receive buffer full).
    pub kernel_drops: u64,
    /// Time frames waited in the model's queue before serialisation, in µs.
    pub queueing_us: Summary,
    /// How late frames were handed to the kernel (`send instant - due`), in µs.
    pub timing_error_us: Summary,
}

/// A summary of a distribution of durations, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

/// The two delay histograms of one direction, in nanoseconds.
#[derive(Debug, Clone)]
pub(crate) struct Histograms {
    pub(crate) queueing: Histogram<u64>,
    pub(crate) timing_error: Histogram<u64>,
}

/// Largest recordable duration: the model's maximum delay (60 s) plus headroom.
const HIGHEST_NS: u64 = 120_000_000_000;

impl Histograms {
    pub(crate) fn new() -> Self {
        let h = || {
            // 3 significant figures: 0.1 % resolution, ~40 KiB per histogram.
            Histogram::new_with_bounds(1, HIGHEST_NS, 3).expect("static bounds are valid")
        };
        Histograms {
            queueing: h(),
            timing_error: h(),
        }
    }

    pub(crate) fn summaries(&self) -> (Summary, Summary) {
        (summarise(&self.queueing), summarise(&self.timing_error))
    }
}

/// Records a duration in ns; values outside the range are clamped into it.
pub(crate) fn record(h: &mut Histogram<u64>, d: Duration) {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    h.saturating_record(ns.clamp(1, HIGHEST_NS));
}

fn summarise(h: &Histogram<u64>) -> Summary {
    if h.is_empty() {
        return Summary::default();
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    Summary {
        count: h.len(),
        mean: h.mean() / 1000.0,
        p50: us(h.value_at_quantile(0.5)),
        p90: us(h.value_at_quantile(0.9)),
        p99: us(h.value_at_quantile(0.99)),
        max: us(h.max()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_in_microseconds() {
        let mut h = Histograms::new();
        assert_eq!(h.summaries().0, Summary::default());
        for us in 1..=100u64 {
            record(&mut h.timing_error, Duration::from_micros(us));
        }
        record(&mut h.queueing, Duration::ZERO);
        record(&mut h.queueing, Duration::from_secs(1000));
        let (q, t) = h.summaries();
        assert_eq!(t.count, 100);
        assert!((t.mean - 50.5).abs() < 0.1, "{t:?}");
        assert!((t.p50 - 50.0).abs() < 0.1, "{t:?}");
        assert!((t.p99 - 99.0).abs() < 0.1, "{t:?}");
        assert!((t.max - 100.0).abs() < 0.1, "{t:?}");
        assert_eq!(q.count, 2);
        assert!(
            q.max >= 119_000_000.0,
            "clamped to the top of the range: {q:?}"
        );
    }
}
