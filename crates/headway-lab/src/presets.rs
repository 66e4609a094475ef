//! Named link presets for the seeds' WAN scenarios.
//!
//! This module owns the table of presets `headway lab up --preset NAME` accepts and
//! `headway lab presets` lists. The numbers are copied from the seeds' data files (which live
//! outside this repository, in `shared/scenarios/`); each row cites its file and row.
//!
//! How a seed's numbers become a [`LinkSetting`]:
//!
//! - **rate** applies to each direction (the seeds' WAN links are symmetric).
//! - **RTT** (`citrix_wan_scenarios.csv`, `rtt_ms`) and the Juniper study's added delay
//!   (`juniper_wx_throughput.csv`, `delay_ms`, which the study describes as the round-trip delay
//!   its WAN simulator added) are round trips: each direction gets half as one-way delay.
//! - **loss** is applied to *each* direction at the stated rate. That is what a WAN emulator set
//!   to "1 % loss" on a link does, and the most plausible reading of the seeds' symmetric
//!   dummynet pipes; the bulk-data direction then sees exactly the stated loss, and ACKs and
//!   requests see it too (slightly harsher than data-direction-only loss). Use `--spec` with
//!   `lab set --dir` for a one-direction loss.
//! - **queue** is one bandwidth-delay product in 1500-byte packets, at least 50 (dummynet's
//!   default queue of 50 slots), so one TCP flow can fill the link without a bloated buffer.
//!   `lan` keeps the emulator's default queue.
//!
//! Everything else is [`Params::default`]: no jitter, no duplication or reordering, MTU 1500.

use std::time::Duration;

use headway_core::{Probability, Rate};
use headway_link::{Loss, Params, QueueLimit};

use crate::spec::{brief, LinkSetting};

/// One named preset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    /// The name `--preset` takes.
    pub name: &'static str,
    /// Rate per direction in bits per second; `None` is unlimited.
    pub rate_bps: Option<u64>,
    /// Round-trip delay added by the link, in microseconds (split evenly between directions).
    pub rtt_us: u64,
    /// Loss per direction, in percent.
    pub loss_pct: f64,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// Every preset, in listing order.
///
/// Sources (files in `shared/scenarios/`):
/// - `citrix_wan_scenarios.csv`: the five named WAN scenarios of seed 000 (rows 1–5);
/// - `juniper_wx_throughput.csv`: the T1 (1.544 Mbit/s) and OC-1 (51.84 Mbit/s) × 0/30/100/250 ms
///   grid of seed 001;
/// - `citrix_sdwan_hdx_rtt.csv` (header comment): the MPLS (2 Mbit/s) and Internet (20 Mbit/s)
///   links of seed 004; the study gives no base delay (its baseline RTT of 3–6 ms is the
///   network's own), so these are rate-only.
pub const PRESETS: &[Preset] = &[
    preset(
        "branch_us_asia",
        Some(1_500_000),
        300,
        1.0,
        "citrix_wan_scenarios.csv row 1",
    ),
    preset(
        "regional_within_us",
        Some(44_000_000),
        90,
        0.1,
        "citrix_wan_scenarios.csv row 2",
    ),
    preset(
        "branch_within_us",
        Some(6_000_000),
        90,
        0.1,
        "citrix_wan_scenarios.csv row 3",
    ),
    preset(
        "branch_us_europe",
        Some(6_000_000),
        200,
        0.1,
        "citrix_wan_scenarios.csv row 4",
    ),
    preset(
        "regional_us_asia",
        Some(6_000_000),
        300,
        0.1,
        "citrix_wan_scenarios.csv row 5",
    ),
    preset(
        "t1_0ms",
        Some(1_544_000),
        0,
        0.0,
        "juniper_wx_throughput.csv, T1 at 0 ms",
    ),
    preset(
        "t1_30ms",
        Some(1_544_000),
        30,
        0.0,
        "juniper_wx_throughput.csv, T1 at 30 ms",
    ),
    preset(
        "t1_100ms",
        Some(1_544_000),
        100,
        0.0,
        "juniper_wx_throughput.csv, T1 at 100 ms",
    ),
    preset(
        "t1_250ms",
        Some(1_544_000),
        250,
        0.0,
        "juniper_wx_throughput.csv, T1 at 250 ms",
    ),
    preset(
        "oc1_0ms",
        Some(51_840_000),
        0,
        0.0,
        "juniper_wx_throughput.csv, OC-1 at 0 ms",
    ),
    preset(
        "oc1_30ms",
        Some(51_840_000),
        30,
        0.0,
        "juniper_wx_throughput.csv, OC-1 at 30 ms",
    ),
    preset(
        "oc1_100ms",
        Some(51_840_000),
        100,
        0.0,
        "juniper_wx_throughput.csv, OC-1 at 100 ms",
    ),
    preset(
        "oc1_250ms",
        Some(51_840_000),
        250,
        0.0,
        "juniper_wx_throughput.csv, OC-1 at 250 ms",
    ),
    preset(
        "mpls",
        Some(2_000_000),
        0,
        0.0,
        "citrix_sdwan_hdx_rtt.csv comment: MPLS 2 Mbit/s",
    ),
    preset(
        "internet",
        Some(20_000_000),
        0,
        0.0,
        "citrix_sdwan_hdx_rtt.csv comment: Internet 20 Mbit/s",
    ),
    preset("lan", None, 0, 0.0, "no limits: a transparent bridge"),
];

const fn preset(
    name: &'static str,
    rate_bps: Option<u64>,
    rtt_ms: u64,
    loss_pct: f64,
    source: &'static str,
) -> Preset {
    Preset {
        name,
        rate_bps,
        rtt_us: rtt_ms * 1000,
        loss_pct,
        source,
    }
}

/// The preset called `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The names of all presets, comma-separated (for error messages).
pub fn names() -> String {
    PRESETS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Preset {
    /// The parameters of each direction: rate, half the RTT as one-way delay, the loss, a BDP
    /// queue (the default queue when the rate is unlimited); everything else is the default.
    pub fn params(&self) -> Params {
        let loss = match Probability::new(self.loss_pct / 100.0) {
            Some(p) if p != Probability::ZERO => Loss::Bernoulli(p),
            _ => Loss::None,
        };
        let queue = match self.rate_bps {
            Some(bps) => QueueLimit {
                packets: Some(bdp_queue(bps, self.rtt_us)),
                ..QueueLimit::default()
            },
            None => QueueLimit::default(),
        };
        Params {
            rate: self.rate_bps.map(Rate::from_bps),
            delay: Duration::from_micros(self.rtt_us / 2),
            loss,
            queue,
            ..Params::default()
        }
    }

    /// The same [`Preset::params`] in both directions.
    pub fn setting(&self) -> LinkSetting {
        LinkSetting::symmetric(self.params())
    }

    /// The short description of [`Preset::params`] (see [`brief`]).
    pub fn describe(&self) -> String {
        brief(&self.params())
    }
}

/// One bandwidth-delay product in 1500-byte packets, at least 50.
pub fn bdp_queue(rate_bps: u64, rtt_us: u64) -> u32 {
    let bdp_bits = u128::from(rate_bps) * u128::from(rtt_us) / 1_000_000;
    let packets = bdp_bits.div_ceil(1500 * 8);
    u32::try_from(packets).unwrap_or(u32::MAX).max(50)
}

/// The listing `headway lab presets` prints: one line per preset with its spec and source.
pub fn listing() -> String {
    let width = PRESETS.iter().map(|p| p.name.len()).max().unwrap_or(0);
    let mut out = String::from(
        "Presets (rate per direction; delay = RTT/2 each way; loss on each direction):\n",
    );
    for p in PRESETS {
        out.push_str(&format!(
            "  {:width$}  {}\n  {:width$}  ({})\n",
            p.name,
            p.describe(),
            "",
            p.source
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = PRESETS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn citrix_rtt_is_split_into_one_way_delays() {
        let p = find("branch_us_asia").unwrap();
        let s = p.setting();
        assert_eq!(s.a_to_b, s.b_to_a);
        assert_eq!(s.a_to_b.delay, Duration::from_millis(150));
        assert_eq!(s.a_to_b.rate, Some(Rate::from_kbps(1500)));
        assert_eq!(
            s.a_to_b.loss,
            Loss::Bernoulli(Probability::new(0.01).unwrap())
        );
        assert_eq!(p.describe(), "rate=1.5mbit delay=150ms loss=1% queue=50");
    }

    #[test]
    fn juniper_grid_is_complete() {
        for rate in ["t1", "oc1"] {
            for d in [0, 30, 100, 250] {
                let p = find(&format!("{rate}_{d}ms")).unwrap();
                assert_eq!(p.params().delay, Duration::from_micros(d * 500));
                assert_eq!(p.params().loss, Loss::None);
            }
        }
        assert_eq!(
            find("oc1_250ms").unwrap().params().rate,
            Some(Rate::from_bps(51_840_000))
        );
        assert_eq!(
            find("t1_0ms").unwrap().describe(),
            "rate=1.544mbit queue=50"
        );
    }

    #[test]
    fn lan_has_no_limits() {
        let lan = find("lan").unwrap();
        assert_eq!(lan.params(), Params::default());
        assert_eq!(lan.describe(), "transparent");
    }

    #[test]
    fn every_preset_is_valid() {
        for p in PRESETS {
            assert_eq!(p.params().validate(), Ok(()), "{}", p.name);
        }
    }

    #[test]
    fn queues_hold_one_bdp_but_at_least_fifty_packets() {
        // 44 Mbit/s × 90 ms = 495,000 bytes = 330 packets of 1500 bytes.
        assert_eq!(bdp_queue(44_000_000, 90_000), 330);
        assert_eq!(bdp_queue(1_500_000, 300_000), 50);
        assert_eq!(bdp_queue(51_840_000, 250_000), 1080);
    }

    #[test]
    fn listing_mentions_every_preset() {
        let l = listing();
        for p in PRESETS {
            assert!(l.contains(p.name));
        }
        assert!(find("nope").is_none());
    }
}
