//! Prometheus exposition of a bridge's stats.
//!
//! [`BridgeHandle`] is a `prometheus_client` [`Collector`]: each scrape takes one
//! [`BridgeHandle::stats`] snapshot and writes it as
//!
//! - `headway_link_frames_total{link,direction,outcome}` (counter), outcome one of `received`,
//!   `passed`, `lost`, `overflow`, `oversize`, `duplicated`, `reordered`, `send_error`,
//!   `truncated`, `kernel_drop`;
//! - `headway_link_bytes_total{link,direction,outcome}` (counter), outcome `received` or
//!   `passed`;
//! - `headway_link_in_flight_frames{link,direction}` (gauge);
//! - `headway_link_queueing_delay_seconds{link,direction,quantile}` and
//!   `headway_link_timing_error_seconds{link,direction,quantile}` (gauges; quantile `0.5`,
//!   `0.9`, `0.99`, `1` for the maximum; cumulative since the bridge started).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::bridge::{BridgeHandle, Direction};
use crate::stats::{DirectionStats, Summary};

impl BridgeHandle {
    /// Adds this bridge's metrics to `registry` (see the module docs for the names).
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.clone()));
    }
}

impl Collector for BridgeHandle {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = self.stats();
        let dirs: [(Direction, &DirectionStats); 2] = [
            (Direction::AtoB, &stats.a_to_b),
            (Direction::BtoA, &stats.b_to_a),
        ];
        let link = stats.name.as_str();

        let mut frames = encoder.encode_descriptor(
            "headway_link_frames",
            "Frames through the emulated link, by outcome",
            None,
            MetricType::Counter,
        )?;
        for (dir, s) in dirs {
            for (outcome, v) in [
                ("received", s.link.received),
                ("passed", s.link.passed),
                ("lost", s.link.lost),
                ("overflow", s.link.overflow),
                ("oversize", s.link.oversize),
                ("duplicated", s.link.duplicated),
                ("reordered", s.link.reordered),
                ("send_error", s.send_errors),
                ("truncated", s.truncated),
                ("kernel_drop", s.kernel_drops),
            ] {
                let labels = [
                    ("link", link),
                    ("direction", dir.as_str()),
                    ("outcome", outcome),
                ];
                frames
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
            }
        }

        let mut bytes = encoder.encode_descriptor(
            "headway_link_bytes",
            "Bytes through the emulated link, by outcome",
            None,
            MetricType::Counter,
        )?;
        for (dir, s) in dirs {
            for (outcome, v) in [
                ("received", s.link.received_bytes),
                ("passed", s.link.passed_bytes),
            ] {
                let labels = [
                    ("link", link),
                    ("direction", dir.as_str()),
                    ("outcome", outcome),
                ];
                bytes
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
            }
        }

        let mut in_flight = encoder.encode_descriptor(
            "headway_link_in_flight_frames",
            "Frames held by the link model (queued or in flight)",
            None,
            MetricType::Gauge,
        )?;
        for (dir, s) in dirs {
            let labels = [("link", link), ("direction", dir.as_str())];
            ConstGauge::new(s.in_flight as i64).encode(in_flight.encode_family(&labels)?)?;
        }

        for (name, help, pick) in [
            (
                "headway_link_queueing_delay_seconds",
                "Time frames waited in the link's queue, quantiles since start",
                (|s: &DirectionStats| s.queueing_us) as fn(&DirectionStats) -> Summary,
            ),
            (
                "headway_link_timing_error_seconds",
                "How late frames were handed to the kernel versus the model's schedule, quantiles since start",
                |s: &DirectionStats| s.timing_error_us,
            ),
        ] {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (dir, s) in dirs {
                let sum = pick(s);
                for (q, us) in [("0.5", sum.p50), ("0.9", sum.p90), ("0.99", sum.p99), ("1", sum.max)] {
                    let labels = [("link", link), ("direction", dir.as_str()), ("quantile", q)];
                    ConstGauge::new(us / 1e6).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}
