//! Link specs as the lab writes them for `headway emulate` and `headway ctl`.
//!
//! This module owns the lab's view of one emulated link's parameters: [`LinkSpec`] (one
//! direction: rate, one-way delay, jitter, loss, queue, plus any other `key=value` passed through
//! verbatim), [`LinkSetting`] (both directions of a link) and [`Dir`].
//!
//! The emulator's own parser (in `headway-config`) is the authority on the text form; this
//! module only produces text it accepts (`rate=1.5mbit delay=150ms jitter=0 loss=1% queue=100`)
//! and reads the same keys back. Since the emulator treats a spec as partial (keys not named are
//! kept), [`LinkSpec`]'s `Display` always names the five core keys, so setting a spec replaces
//! what a previous one configured (`rate=unlimited` lifts a rate limit).
//!
//! Orientation: side `a` of every emulated link faces the client (or branch), side `b` the
//! server (or data centre); `a_to_b` is the upload direction, `b_to_a` the download direction.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use headway_core::units::{format_duration, parse_duration};
use headway_core::{Probability, Rate};
use serde::{Deserialize, Serialize};

/// The emulator's default queue limit in packets (Linux's default `txqueuelen`).
pub const DEFAULT_QUEUE: u32 = 1000;

/// One direction of an emulated link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpec {
    /// Serialisation rate (the whole Ethernet frame counts); `None` is unlimited.
    pub rate: Option<Rate>,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Delay variation (the emulator's default distribution).
    pub jitter: Duration,
    /// Independent per-frame loss probability in this direction.
    pub loss: Probability,
    /// Drop-tail queue limit in packets.
    pub queue: u32,
    /// Other `key=value` pairs (e.g. `overhead=ethernet`), passed to the emulator unchanged.
    pub extra: Vec<(String, String)>,
}

/// Why a spec's text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A word is not of the form `key=value`.
    #[error("`{word}` is not key=value (e.g. `rate=1.5mbit delay=150ms loss=1%`)")]
    NotKeyValue {
        /// The offending word.
        word: String,
    },
    /// A known key has a value of the wrong form.
    #[error("bad value for `{key}`: {message}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl LinkSpec {
    /// A transparent link: unlimited rate, no delay, no jitter, no loss, default queue.
    pub fn transparent() -> Self {
        LinkSpec {
            rate: None,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: Probability::ZERO,
            queue: DEFAULT_QUEUE,
            extra: Vec::new(),
        }
    }

    /// This spec with `rate`.
    pub fn with_rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// This spec with one-way `delay`.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// This spec with loss probability `loss`.
    pub fn with_loss(mut self, loss: Probability) -> Self {
        self.loss = loss;
        self
    }

    /// This spec with a queue limit of `packets`.
    pub fn with_queue(mut self, packets: u32) -> Self {
        self.queue = packets;
        self
    }
}

impl Default for LinkSpec {
    fn default() -> Self {
        LinkSpec::transparent()
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rate {
            Some(r) => write!(f, "rate={r}")?,
            None => f.write_str("rate=unlimited")?,
        }
        write!(
            f,
            " delay={} jitter={} loss={} queue={}",
            format_duration(self.delay),
            format_duration(self.jitter),
            self.loss,
            self.queue
        )?;
        for (k, v) in &self.extra {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

impl FromStr for LinkSpec {
    type Err = SpecError;

    /// Reads `key=value` words separated by spaces or commas on top of
    /// [`LinkSpec::transparent`]. Unknown keys are kept in [`LinkSpec::extra`] for the emulator
    /// to judge.
    fn from_str(text: &str) -> Result<Self, SpecError> {
        let mut spec = LinkSpec::transparent();
        for word in split_words(text) {
            let (key, value) = word.split_once('=').ok_or_else(|| SpecError::NotKeyValue {
                word: word.to_string(),
            })?;
            let bad = |message: String| SpecError::BadValue {
                key: key.to_string(),
                message,
            };
            match key {
                "rate" if is_unlimited(value) => spec.rate = None,
                "rate" => spec.rate = Some(value.parse().map_err(|e| bad(format!("{e}")))?),
                "delay" => spec.delay = parse_duration(value).map_err(|e| bad(format!("{e}")))?,
                "jitter" => spec.jitter = parse_duration(value).map_err(|e| bad(format!("{e}")))?,
                "loss" if is_unlimited(value) => spec.loss = Probability::ZERO,
                "loss" if value.starts_with("ge:") => {
                    spec.extra.push((key.to_string(), value.to_string()));
                }
                "loss" => spec.loss = value.parse().map_err(|e| bad(format!("{e}")))?,
                "queue" => {
                    spec.queue = value
                        .parse()
                        .ok()
                        .filter(|q| *q > 0)
                        .ok_or_else(|| bad("a whole number of packets ≥ 1".into()))?;
                }
                _ => spec.extra.push((key.to_string(), value.to_string())),
            }
        }
        Ok(spec)
    }
}

/// Splits a spec on spaces and on the commas that separate keys (a comma followed by a word
/// with `=` whose key is a link key); commas inside a value such as `ge:p=1%,r=30%` stay.
fn split_words(text: &str) -> Vec<&str> {
    const KEYS: [&str; 13] = [
        "rate",
        "overhead",
        "delay",
        "jitter",
        "jitter_dist",
        "loss",
        "duplicate",
        "reorder",
        "reorder_gap",
        "queue",
        "queue_bytes",
        "mtu",
        "name",
    ];
    let mut words = Vec::new();
    for chunk in text.split_whitespace() {
        let mut start = 0;
        let bytes = chunk.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if *b == b',' {
                let rest = &chunk[i + 1..];
                let key = rest.split('=').next().unwrap_or("");
                if rest.contains('=') && KEYS.contains(&key) {
                    words.push(&chunk[start..i]);
                    start = i + 1;
                }
            }
        }
        words.push(&chunk[start..]);
    }
    words.into_iter().filter(|w| !w.is_empty()).collect()
}

fn is_unlimited(v: &str) -> bool {
    v.eq_ignore_ascii_case("unlimited") || v.eq_ignore_ascii_case("none")
}

/// Which direction(s) of a link a change applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// Both directions.
    #[value(name = "both")]
    Both,
    /// From side a (client / branch) to side b (server / data centre).
    #[value(name = "a_to_b")]
    AToB,
    /// From side b (server / data centre) to side a (client / branch).
    #[value(name = "b_to_a")]
    BToA,
}

impl Dir {
    /// The name `headway ctl --dir` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Both => "both",
            Dir::AToB => "a_to_b",
            Dir::BToA => "b_to_a",
        }
    }
}

/// Both directions of an emulated link.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkSetting {
    /// Client (a) → server (b): the upload direction.
    pub a_to_b: LinkSpec,
    /// Server (b) → client (a): the download direction.
    pub b_to_a: LinkSpec,
}

impl LinkSetting {
    /// The same spec in both directions.
    pub fn symmetric(spec: LinkSpec) -> Self {
        LinkSetting {
            a_to_b: spec.clone(),
            b_to_a: spec,
        }
    }

    /// The `headway emulate` arguments that configure this setting: `--both SPEC` when both
    /// directions agree, else `--a-to-b SPEC --b-to-a SPEC`.
    pub fn emulate_args(&self) -> Vec<String> {
        if self.a_to_b == self.b_to_a {
            vec!["--both".into(), self.a_to_b.to_string()]
        } else {
            vec![
                "--a-to-b".into(),
                self.a_to_b.to_string(),
                "--b-to-a".into(),
                self.b_to_a.to_string(),
            ]
        }
    }

    /// A one-line description: `SPEC` when symmetric, else `a→b: SPEC; b→a: SPEC`.
    pub fn describe(&self) -> String {
        if self.a_to_b == self.b_to_a {
            self.a_to_b.to_string()
        } else {
            format!("a→b: {}; b→a: {}", self.a_to_b, self.b_to_a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_every_core_key_so_a_set_replaces_the_previous_one() {
        let s = LinkSpec::transparent().to_string();
        assert_eq!(s, "rate=unlimited delay=0 jitter=0 loss=0% queue=1000");
    }

    #[test]
    fn spec_text_round_trips() {
        let spec: LinkSpec =
            "rate=1.5mbit,delay=150ms jitter=5ms loss=1% queue=100 overhead=ethernet"
                .parse()
                .unwrap();
        assert_eq!(spec.rate, Some(Rate::from_kbps(1500)));
        assert_eq!(spec.delay, Duration::from_millis(150));
        assert_eq!(spec.jitter, Duration::from_millis(5));
        assert_eq!(spec.loss, Probability::new(0.01).unwrap());
        assert_eq!(spec.queue, 100);
        assert_eq!(
            spec.extra,
            vec![("overhead".to_string(), "ethernet".to_string())]
        );
        let again: LinkSpec = spec.to_string().parse().unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn gilbert_elliott_commas_stay_inside_the_value() {
        let spec: LinkSpec = "loss=ge:p=1%,r=30%,delay=10ms".parse().unwrap();
        assert_eq!(spec.delay, Duration::from_millis(10));
        assert_eq!(
            spec.extra,
            vec![("loss".to_string(), "ge:p=1%,r=30%".to_string())]
        );
    }

    #[test]
    fn bad_specs_are_refused_with_the_key() {
        assert!(matches!(
            "rate".parse::<LinkSpec>(),
            Err(SpecError::NotKeyValue { .. })
        ));
        let e = "delay=fast".parse::<LinkSpec>().unwrap_err();
        assert!(e.to_string().contains("delay"), "{e}");
        assert!("queue=0".parse::<LinkSpec>().is_err());
        assert!("loss=150%".parse::<LinkSpec>().is_err());
    }

    #[test]
    fn emulate_args_use_both_only_when_symmetric() {
        let sym =
            LinkSetting::symmetric(LinkSpec::transparent().with_delay(Duration::from_millis(5)));
        assert_eq!(sym.emulate_args()[0], "--both");
        assert_eq!(sym.emulate_args().len(), 2);
        let mut asym = sym.clone();
        asym.a_to_b.loss = Probability::new(0.05).unwrap();
        let args = asym.emulate_args();
        assert_eq!(args[0], "--a-to-b");
        assert!(args[1].contains("loss=5%"));
        assert_eq!(args[2], "--b-to-a");
        assert!(args[3].contains("loss=0%"));
    }
}
