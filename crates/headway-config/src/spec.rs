//! [`LinkSpec`]: the user-facing form of one link direction's parameters.
//!
//! This module owns the textual and serde forms of a link's parameters and their conversion to
//! and from the runtime type [`headway_link::Params`]. It does not run links or read files.
//!
//! A spec is *partial*: every key is optional, and [`LinkSpec::apply`] changes only the keys it
//! names on top of a base [`Params`]. The same spec is written three ways:
//!
//! - **text** (command line, `headway ctl`, a string in TOML or JSON): `key=value` pairs separated
//!   by spaces or commas, e.g. `rate=1.5mbit delay=150ms jitter=5ms loss=1% queue=100`;
//! - **a TOML table** with the same keys: `{ rate = "1.5mbit", delay = "150ms" }`;
//! - **a JSON object** with the same keys (the admin API).
//!
//! ## Keys
//!
//! | key | value | meaning | default (in [`Params::default`]) |
//! |---|---|---|---|
//! | `rate` | a rate (`1.5mbit`, `64kbit`, `10gbit`) or `unlimited`/`none` | serialisation rate, bits per second | `unlimited` |
//! | `overhead` | bytes, or `ethernet` (= 24) or `none` (= 0) | extra bytes counted per frame for the rate | `0` |
//! | `delay` | a duration (`150ms`, `1.5s`, `0`) | one-way propagation delay | `0` |
//! | `jitter` | a duration | delay variation (uniform half-width or normal std-dev) | `0` |
//! | `jitter_dist` | `uniform` or `normal` | shape of the variation | `uniform` |
//! | `loss` | a probability (`1%`, `0.01`), `none`, or `ge:…` (below) | loss model | `none` |
//! | `duplicate` | a probability | chance that a frame is delivered twice | `0%` |
//! | `reorder` | a probability | chance that a frame is held back by `reorder_gap` | `0%` |
//! | `reorder_gap` | a duration | how long a held-back frame waits | `0` |
//! | `queue` | a whole number of packets (`100` or `100p`), or `unlimited`/`none` | drop-tail queue limit in packets | `1000` |
//! | `queue_bytes` | a size (`64KiB`, `1.5MB`, `1500`) or `unlimited`/`none` | queue limit in bytes | `unlimited` |
//! | `mtu` | a whole number of bytes, 68–65535 | largest L3 packet that passes | `1500` |
//!
//! ## Gilbert–Elliott loss
//!
//! `loss=ge:p=1%,r=30%,bad=100%,good=0%`: move Good→Bad with probability `p` and Bad→Good with
//! probability `r` before each frame; lose frames with probability `bad` in the Bad state and
//! `good` in the Good state. `p` and `r` are required, `bad` defaults to `100%` and `good` to
//! `0%`. The model's own parameters are separated by commas; since `p`, `r`, `bad` and `good` are
//! not link keys, the commas never clash with the commas that may separate link keys. In TOML
//! the loss can also be a table: `loss = { p = "1%", r = "30%", bad = "100%", good = "0%" }`.
//!
//! ## Invariants
//!
//! - `spec.to_string().parse::<LinkSpec>() == Ok(spec)` for every spec.
//! - `LinkSpec::from(&params)` names every key, so `Params::try_from(&LinkSpec::from(&p)) == p`
//!   for every valid `p`.
//! - [`LinkSpec::changes`]`(b, t)` names only the keys where `t` differs from `b`, and
//!   `LinkSpec::changes(b, t).apply(b) == Ok(t)` for every valid `t`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use headway_core::units::{format_duration, parse_duration};
use headway_core::{ByteSize, Probability, Rate};
use headway_link::{
    Jitter, JitterDistribution, Loss, Params, ParamsError, QueueLimit, Reorder, ETHERNET_OVERHEAD,
};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::suggest::did_you_mean;

/// Every key a [`LinkSpec`] knows, in the order [`fmt::Display`] writes them.
pub const KEYS: &[&str] = &[
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
];

/// The parameters of a Gilbert–Elliott loss value (`loss=ge:p=…,r=…,bad=…,good=…`).
const GE_KEYS: &[&str] = &["p", "r", "bad", "good"];

/// A partial set of link parameters, as users write them. See the [module docs](self) for the
/// keys and the text syntax.
///
/// `None` in a field means "not given": [`LinkSpec::apply`] leaves that parameter of the base
/// unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Serialisation rate in bits per second (`"1.5mbit"`, `"64kbit"`; k = 1000), or
    /// `"unlimited"` / `"none"` for no rate limit. Default: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Limit<Rate>>,
    /// Extra bytes counted per frame when computing serialisation time: a whole number of
    /// bytes, `"ethernet"` (24: preamble, FCS and inter-frame gap) or `"none"` (0). Default: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// One-way propagation delay (`"150ms"`, `"1.5s"`, `"0"`), at most 60 s. Default: 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_duration"
    )]
    pub delay: Option<Duration>,
    /// Delay variation (`"5ms"`): the half-width of a uniform distribution or the standard
    /// deviation of a normal one, at most 60 s. Jitter alone never reorders frames. Default: 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_duration"
    )]
    pub jitter: Option<Duration>,
    /// Shape of the delay variation: `"uniform"` or `"normal"`. Default: uniform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_dist: Option<JitterDist>,
    /// Loss model: a probability (`"1%"`, `"0.01"`) for independent loss, `"none"`, or a
    /// Gilbert–Elliott model (`"ge:p=1%,r=30%,bad=100%,good=0%"`, or in TOML a table with
    /// those keys). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<LossSpec>,
    /// Probability that a frame is delivered twice (`"0.1%"`). Default: 0%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<Probability>,
    /// Probability that a frame is held back by `reorder_gap`, so later frames overtake it
    /// (`"1%"`). Default: 0%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder: Option<Probability>,
    /// How much longer a held-back frame waits (`"5ms"`). Default: 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_duration"
    )]
    pub reorder_gap: Option<Duration>,
    /// Drop-tail queue limit in packets (a whole number ≥ 1), or `"unlimited"` / `"none"`.
    /// Default: 1000 (Linux's default `txqueuelen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Limit<u32>>,
    /// Drop-tail queue limit in bytes (`"64KiB"`, `"1.5MB"`; KiB = 1024, kB = 1000), or
    /// `"unlimited"` / `"none"`. Default: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_bytes: Option<Limit<ByteSize>>,
    /// Largest L3 packet in bytes that passes (68–65535); larger frames are dropped.
    /// Default: 1500.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_mtu"
    )]
    pub mtu: Option<u32>,
}

impl LinkSpec {
    /// Whether the spec names no key at all (applying it changes nothing).
    pub fn is_empty(&self) -> bool {
        *self == LinkSpec::default()
    }

    /// The parameters `base` with every key this spec names replaced, validated with
    /// [`Params::validate`].
    pub fn apply(&self, base: &Params) -> Result<Params, SpecError> {
        let mut p = base.clone();
        if let Some(rate) = self.rate {
            p.rate = rate.into_option();
        }
        if let Some(o) = self.overhead {
            p.overhead = o.0;
        }
        if let Some(d) = self.delay {
            p.delay = d;
        }
        if let Some(j) = self.jitter {
            p.jitter.amount = j;
        }
        if let Some(d) = self.jitter_dist {
            p.jitter.distribution = d.into();
        }
        if let Some(loss) = self.loss {
            p.loss = loss.into();
        }
        if let Some(d) = self.duplicate {
            p.duplicate = d;
        }
        if let Some(r) = self.reorder {
            p.reorder.probability = r;
        }
        if let Some(g) = self.reorder_gap {
            p.reorder.gap = g;
        }
        if let Some(q) = self.queue {
            p.queue.packets = q.into_option();
        }
        if let Some(q) = self.queue_bytes {
            p.queue.bytes = q.into_option().map(ByteSize::bytes);
        }
        if let Some(m) = self.mtu {
            p.mtu = m;
        }
        p.validate()?;
        Ok(p)
    }

    /// The keys whose values differ between `base` and `target`, with `target`'s values: the
    /// spec that turns `base` into `target`, so `LinkSpec::changes(b, t).apply(b) == Ok(t)` for
    /// every valid `t`.
    ///
    /// `LinkSpec::changes(&Params::default(), &p)` is the short form of `p` for people to read
    /// (`rate=1.5mbit delay=150ms loss=1% queue=50`): `Params::try_from` reads it back as `p`.
    /// It is *not* a replacement for a live link's settings, which keep every key it does not
    /// name; send the full `LinkSpec::from(&p)` for that.
    pub fn changes(base: &Params, target: &Params) -> LinkSpec {
        fn keep<T: PartialEq>(base: Option<T>, target: Option<T>) -> Option<T> {
            if base == target {
                None
            } else {
                target
            }
        }
        let (b, t) = (LinkSpec::from(base), LinkSpec::from(target));
        LinkSpec {
            rate: keep(b.rate, t.rate),
            overhead: keep(b.overhead, t.overhead),
            delay: keep(b.delay, t.delay),
            jitter: keep(b.jitter, t.jitter),
            jitter_dist: keep(b.jitter_dist, t.jitter_dist),
            loss: keep(b.loss, t.loss),
            duplicate: keep(b.duplicate, t.duplicate),
            reorder: keep(b.reorder, t.reorder),
            reorder_gap: keep(b.reorder_gap, t.reorder_gap),
            queue: keep(b.queue, t.queue),
            queue_bytes: keep(b.queue_bytes, t.queue_bytes),
            mtu: keep(b.mtu, t.mtu),
        }
    }

    /// Every key given in both `self` and `over` takes `over`'s value: the spec equivalent of
    /// applying `self` and then `over`.
    pub fn merged(&self, over: &LinkSpec) -> LinkSpec {
        LinkSpec {
            rate: over.rate.or(self.rate),
            overhead: over.overhead.or(self.overhead),
            delay: over.delay.or(self.delay),
            jitter: over.jitter.or(self.jitter),
            jitter_dist: over.jitter_dist.or(self.jitter_dist),
            loss: over.loss.or(self.loss),
            duplicate: over.duplicate.or(self.duplicate),
            reorder: over.reorder.or(self.reorder),
            reorder_gap: over.reorder_gap.or(self.reorder_gap),
            queue: over.queue.or(self.queue),
            queue_bytes: over.queue_bytes.or(self.queue_bytes),
            mtu: over.mtu.or(self.mtu),
        }
    }

    /// Sets one key from its text value, as the text parser does for `key=value`.
    fn set(&mut self, key: &str, value: &str) -> Result<(), SpecError> {
        let Some(key) = KEYS.iter().copied().find(|k| *k == key) else {
            if GE_KEYS.contains(&key) {
                return Err(SpecError::StrayLossParameter {
                    piece: format!("{key}={value}"),
                });
            }
            return Err(SpecError::UnknownKey {
                key: key.to_string(),
                suggestion: did_you_mean(key, KEYS),
            });
        };
        let bad = |reason: String| SpecError::Value { key, reason };
        macro_rules! put {
            ($field:ident, $parsed:expr) => {{
                if self.$field.is_some() {
                    return Err(SpecError::Duplicate { key });
                }
                self.$field = Some($parsed.map_err(bad)?);
            }};
        }
        match key {
            "rate" => put!(rate, value.parse::<Limit<Rate>>()),
            "overhead" => put!(overhead, value.parse::<Overhead>()),
            "delay" => put!(delay, parse_duration(value).map_err(|e| e.to_string())),
            "jitter" => put!(jitter, parse_duration(value).map_err(|e| e.to_string())),
            "jitter_dist" => put!(jitter_dist, value.parse::<JitterDist>()),
            "loss" => put!(loss, value.parse::<LossSpec>()),
            "duplicate" => put!(duplicate, parse_probability(value)),
            "reorder" => put!(reorder, parse_probability(value)),
            "reorder_gap" => put!(
                reorder_gap,
                parse_duration(value).map_err(|e| e.to_string())
            ),
            "queue" => put!(queue, value.parse::<Limit<u32>>()),
            "queue_bytes" => put!(queue_bytes, value.parse::<Limit<ByteSize>>()),
            "mtu" => put!(mtu, parse_mtu(value)),
            _ => unreachable!("every key in KEYS has an arm"),
        }
        Ok(())
    }
}

/// Why a link spec could not be parsed or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A key that is not one of [`KEYS`].
    #[error(
        "unknown key `{key}`{}; known keys: {}",
        suggestion_text(*.suggestion),
        KEYS.join(", ")
    )]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The closest known key, if one is close.
        suggestion: Option<&'static str>,
    },
    /// A piece of text without `=`.
    #[error("`{piece}` is not a key=value pair: write e.g. `delay=150ms`")]
    NotAPair {
        /// The piece as written.
        piece: String,
    },
    /// A Gilbert–Elliott parameter (`p`, `r`, `bad`, `good`) outside a `loss=ge:` value.
    #[error(
        "`{piece}` is a parameter of Gilbert–Elliott loss: write it right after \
         `loss=ge:`, e.g. `loss=ge:p=1%,r=30%,bad=100%,good=0%`"
    )]
    StrayLossParameter {
        /// The piece as written.
        piece: String,
    },
    /// The same key appears twice.
    #[error("`{key}` is given twice: give each key once")]
    Duplicate {
        /// The repeated key.
        key: &'static str,
    },
    /// A value that does not parse for its key.
    #[error("{key}: {reason}")]
    Value {
        /// The key whose value is wrong.
        key: &'static str,
        /// What is wrong and what to write instead.
        reason: String,
    },
    /// The values parse but the resulting parameters are not usable.
    #[error("{0}")]
    Invalid(#[from] ParamsError),
}

fn suggestion_text(s: Option<&str>) -> String {
    s.map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// A limit that may be switched off: `"unlimited"` (or `"none"`) or a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit<T> {
    /// No limit.
    Unlimited,
    /// Limited to this value.
    At(T),
}

impl<T> Limit<T> {
    /// `None` for [`Limit::Unlimited`], the value otherwise.
    pub fn into_option(self) -> Option<T> {
        match self {
            Limit::Unlimited => None,
            Limit::At(v) => Some(v),
        }
    }

    /// [`Limit::Unlimited`] for `None`, the value otherwise.
    pub fn from_option(v: Option<T>) -> Self {
        v.map_or(Limit::Unlimited, Limit::At)
    }
}

fn is_unlimited(text: &str) -> bool {
    let t = text.trim();
    t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("none")
}

impl FromStr for Limit<Rate> {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if is_unlimited(text) {
            return Ok(Limit::Unlimited);
        }
        text.parse::<Rate>()
            .map(Limit::At)
            .map_err(|e| format!("{e}; or `unlimited` for no limit"))
    }
}

impl FromStr for Limit<ByteSize> {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if is_unlimited(text) {
            return Ok(Limit::Unlimited);
        }
        text.parse::<ByteSize>()
            .map(Limit::At)
            .map_err(|e| format!("{e}; or `unlimited` for no limit"))
    }
}

impl FromStr for Limit<u32> {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if is_unlimited(text) {
            return Ok(Limit::Unlimited);
        }
        let t = text.trim();
        let t = t.strip_suffix('p').unwrap_or(t);
        t.parse::<u32>().map(Limit::At).map_err(|_| {
            format!(
                "`{text}` is not a packet count: write a whole number of packets such as \
                 `100`, or `unlimited`"
            )
        })
    }
}

impl<T: fmt::Display> fmt::Display for Limit<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Unlimited => f.write_str("unlimited"),
            Limit::At(v) => v.fmt(f),
        }
    }
}

impl<T: fmt::Display> Serialize for Limit<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de, T> Deserialize<'de> for Limit<T>
where
    Limit<T>: FromStr<Err = String>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor::<Limit<T>>::new(
            "a limit: a value or \"unlimited\"",
        ))
    }
}

/// Per-frame overhead in bytes; written as a number, `ethernet` (24) or `none` (0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overhead(pub u32);

impl FromStr for Overhead {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("ethernet") {
            return Ok(Overhead(ETHERNET_OVERHEAD));
        }
        if t.eq_ignore_ascii_case("none") {
            return Ok(Overhead(0));
        }
        let n = t.strip_suffix('B').unwrap_or(t);
        n.parse::<u32>().map(Overhead).map_err(|_| {
            format!(
                "`{text}` is not an overhead: write a whole number of bytes such as `24`, \
                 `ethernet` (24 bytes) or `none`"
            )
        })
    }
}

impl fmt::Display for Overhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == ETHERNET_OVERHEAD {
            f.write_str("ethernet")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl Serialize for Overhead {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Overhead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor::<Overhead>::new(
            "an overhead: bytes, \"ethernet\" or \"none\"",
        ))
    }
}

/// Shape of the delay variation; see [`JitterDistribution`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JitterDist {
    /// Uniform in `[delay - jitter, delay + jitter]`.
    #[default]
    Uniform,
    /// Normal with mean `delay` and standard deviation `jitter`.
    Normal,
}

impl FromStr for JitterDist {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "uniform" => Ok(JitterDist::Uniform),
            "normal" | "gaussian" => Ok(JitterDist::Normal),
            _ => Err(format!(
                "`{text}` is not a jitter distribution: write `uniform` or `normal`"
            )),
        }
    }
}

impl fmt::Display for JitterDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JitterDist::Uniform => "uniform",
            JitterDist::Normal => "normal",
        })
    }
}

impl From<JitterDist> for JitterDistribution {
    fn from(d: JitterDist) -> Self {
        match d {
            JitterDist::Uniform => JitterDistribution::Uniform,
            JitterDist::Normal => JitterDistribution::Normal,
        }
    }
}

impl Serialize for JitterDist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JitterDist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor::<JitterDist>::new(
            "a jitter distribution: \"uniform\" or \"normal\"",
        ))
    }
}

/// A loss model as users write it; see [`Loss`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum LossSpec {
    /// No loss (`none`).
    #[default]
    None,
    /// Independent loss with this probability (`1%`, `0.01`).
    Bernoulli(Probability),
    /// Gilbert–Elliott (`ge:p=1%,r=30%,bad=100%,good=0%`).
    GilbertElliott {
        /// Probability of moving from Good to Bad before each frame.
        p: Probability,
        /// Probability of moving from Bad to Good before each frame.
        r: Probability,
        /// Loss probability in the Bad state (default 100%).
        bad: Probability,
        /// Loss probability in the Good state (default 0%).
        good: Probability,
    },
}

impl LossSpec {
    /// Builds a Gilbert–Elliott model from its parameters; `p` and `r` are required.
    fn ge(
        text: &str,
        p: Option<Probability>,
        r: Option<Probability>,
        bad: Option<Probability>,
        good: Option<Probability>,
    ) -> Result<Self, String> {
        match (p, r) {
            (Some(p), Some(r)) => Ok(LossSpec::GilbertElliott {
                p,
                r,
                bad: bad.unwrap_or(Probability::new(1.0).unwrap_or_default()),
                good: good.unwrap_or(Probability::ZERO),
            }),
            _ => Err(format!(
                "`{text}`: Gilbert–Elliott loss needs both `p` (Good→Bad) and `r` (Bad→Good), \
                 e.g. `ge:p=1%,r=30%,bad=100%,good=0%`"
            )),
        }
    }
}

impl FromStr for LossSpec {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("none") {
            return Ok(LossSpec::None);
        }
        let ge_prefix = t.get(..3).filter(|p| p.eq_ignore_ascii_case("ge:"));
        let Some(_) = ge_prefix else {
            return parse_probability(t).map(LossSpec::Bernoulli).map_err(|e| {
                format!("{e}; or `none`, or Gilbert–Elliott as `ge:p=1%,r=30%,bad=100%,good=0%`")
            });
        };
        let mut vals: [Option<Probability>; 4] = [None; 4];
        for piece in t[3..].split([',', ' ']).filter(|s| !s.is_empty()) {
            let Some((k, v)) = piece.split_once('=') else {
                return Err(format!(
                    "`{piece}` in `{text}` is not a key=value pair: write e.g. \
                     `ge:p=1%,r=30%,bad=100%,good=0%`"
                ));
            };
            let Some(i) = GE_KEYS.iter().position(|g| *g == k) else {
                return Err(format!(
                    "`{k}` in `{text}` is not a Gilbert–Elliott parameter{}: use p, r, bad, good",
                    suggestion_text(did_you_mean(k, GE_KEYS))
                ));
            };
            if vals[i].is_some() {
                return Err(format!("`{k}` is given twice in `{text}`: give it once"));
            }
            vals[i] = Some(parse_probability(v).map_err(|e| format!("ge {k}: {e}"))?);
        }
        let [p, r, bad, good] = vals;
        LossSpec::ge(text, p, r, bad, good)
    }
}

impl fmt::Display for LossSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossSpec::None => f.write_str("none"),
            LossSpec::Bernoulli(p) => p.fmt(f),
            LossSpec::GilbertElliott { p, r, bad, good } => {
                write!(f, "ge:p={p},r={r},bad={bad},good={good}")
            }
        }
    }
}

impl From<LossSpec> for Loss {
    fn from(l: LossSpec) -> Self {
        match l {
            LossSpec::None => Loss::None,
            LossSpec::Bernoulli(p) => Loss::Bernoulli(p),
            LossSpec::GilbertElliott { p, r, bad, good } => Loss::GilbertElliott {
                p,
                r,
                loss_good: good,
                loss_bad: bad,
            },
        }
    }
}

impl Serialize for LossSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LossSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The table form of Gilbert–Elliott loss.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct GeTable {
            p: Option<Probability>,
            r: Option<Probability>,
            bad: Option<Probability>,
            good: Option<Probability>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LossSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a loss model: a probability such as \"1%\", \"none\", \
                     \"ge:p=1%,r=30%\" or a table { p, r, bad, good }",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LossSpec, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LossSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LossSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<LossSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LossSpec, A::Error> {
                let t = GeTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                LossSpec::ge("the loss table", t.p, t.r, t.bad, t.good).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A [`LinkSpec`] written either as text (`"rate=1.5mbit delay=150ms"`) or as a table/object of
/// the same keys. This is how config files and the admin API accept specs; it serialises as the
/// table form.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct LinkSpecInput(pub LinkSpec);

impl<'de> Deserialize<'de> for LinkSpecInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LinkSpecInput;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a link spec: a string such as \"rate=1.5mbit delay=150ms\" or a table \
                     of the same keys",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LinkSpecInput, E> {
                v.parse().map(LinkSpecInput).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LinkSpecInput, A::Error> {
                LinkSpec::deserialize(de::value::MapAccessDeserializer::new(map)).map(LinkSpecInput)
            }
        }
        d.deserialize_any(V)
    }
}

impl From<LinkSpecInput> for LinkSpec {
    fn from(i: LinkSpecInput) -> Self {
        i.0
    }
}

impl FromStr for LinkSpec {
    type Err = SpecError;

    /// Parses the text form: `key=value` pairs separated by whitespace or commas.
    fn from_str(text: &str) -> Result<Self, SpecError> {
        let mut spec = LinkSpec::default();
        // The value of a `loss=ge:` pair being assembled from comma-separated pieces.
        let mut ge: Option<String> = None;
        for piece in text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
        {
            let Some((key, value)) = piece.split_once('=') else {
                return Err(match KEYS.iter().find(|k| **k == piece) {
                    Some(k) => SpecError::Value {
                        key: k,
                        reason: format!("no value: write `{k}=VALUE`"),
                    },
                    None => SpecError::NotAPair {
                        piece: piece.to_string(),
                    },
                });
            };
            if let Some(acc) = ge.as_mut() {
                // A Gilbert–Elliott value goes on until a link key (or something that looks
                // like a misspelt one) starts the next pair; anything else belongs to the model
                // and is reported by its parser.
                let belongs = GE_KEYS.contains(&key)
                    || (!KEYS.contains(&key) && did_you_mean(key, KEYS).is_none());
                if belongs {
                    acc.push(',');
                    acc.push_str(piece);
                    continue;
                }
            }
            if let Some(acc) = ge.take() {
                spec.set("loss", &acc)?;
            }
            let is_ge = key == "loss"
                && value
                    .get(..3)
                    .is_some_and(|p| p.eq_ignore_ascii_case("ge:"));
            if is_ge {
                if spec.loss.is_some() {
                    return Err(SpecError::Duplicate { key: "loss" });
                }
                ge = Some(value.to_string());
            } else {
                spec.set(key, value)?;
            }
        }
        if let Some(acc) = ge.take() {
            spec.set("loss", &acc)?;
        }
        Ok(spec)
    }
}

impl fmt::Display for LinkSpec {
    /// The text form, keys in the order of [`KEYS`], separated by single spaces. An empty spec
    /// is the empty string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut put = |f: &mut fmt::Formatter<'_>, key: &str, v: &dyn fmt::Display| {
            let sep = if first { "" } else { " " };
            first = false;
            write!(f, "{sep}{key}={v}")
        };
        let dur = |d: &Duration| format_duration(*d);
        if let Some(v) = &self.rate {
            put(f, "rate", v)?;
        }
        if let Some(v) = &self.overhead {
            put(f, "overhead", v)?;
        }
        if let Some(v) = &self.delay {
            put(f, "delay", &dur(v))?;
        }
        if let Some(v) = &self.jitter {
            put(f, "jitter", &dur(v))?;
        }
        if let Some(v) = &self.jitter_dist {
            put(f, "jitter_dist", v)?;
        }
        if let Some(v) = &self.loss {
            put(f, "loss", v)?;
        }
        if let Some(v) = &self.duplicate {
            put(f, "duplicate", v)?;
        }
        if let Some(v) = &self.reorder {
            put(f, "reorder", v)?;
        }
        if let Some(v) = &self.reorder_gap {
            put(f, "reorder_gap", &dur(v))?;
        }
        if let Some(v) = &self.queue {
            put(f, "queue", v)?;
        }
        if let Some(v) = &self.queue_bytes {
            put(f, "queue_bytes", v)?;
        }
        if let Some(v) = &self.mtu {
            put(f, "mtu", v)?;
        }
        Ok(())
    }
}

impl From<&Params> for LinkSpec {
    /// The full spec of `p`: every key named, so that showing it shows everything.
    fn from(p: &Params) -> Self {
        let jitter_dist = match p.jitter.distribution {
            JitterDistribution::Normal => JitterDist::Normal,
            // `JitterDistribution` is non-exhaustive; a future shape this version of the spec
            // cannot name shows as the default one.
            _ => JitterDist::Uniform,
        };
        let loss = match p.loss {
            Loss::None => LossSpec::None,
            Loss::Bernoulli(q) => LossSpec::Bernoulli(q),
            Loss::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => LossSpec::GilbertElliott {
                p,
                r,
                bad: loss_bad,
                good: loss_good,
            },
            // `Loss` is non-exhaustive; a future model shows as independent loss at its mean
            // rate, the closest thing this version of the spec can name.
            ref other => {
                LossSpec::Bernoulli(Probability::new(other.mean_rate()).unwrap_or_default())
            }
        };
        let Params {
            rate,
            overhead,
            delay,
            jitter: Jitter { amount, .. },
            duplicate,
            reorder: Reorder { probability, gap },
            queue: QueueLimit { packets, bytes },
            mtu,
            ..
        } = *p;
        LinkSpec {
            rate: Some(Limit::from_option(rate)),
            overhead: Some(Overhead(overhead)),
            delay: Some(delay),
            jitter: Some(amount),
            jitter_dist: Some(jitter_dist),
            loss: Some(loss),
            duplicate: Some(duplicate),
            reorder: Some(probability),
            reorder_gap: Some(gap),
            queue: Some(Limit::from_option(packets)),
            queue_bytes: Some(Limit::from_option(bytes.map(ByteSize::new))),
            mtu: Some(mtu),
        }
    }
}

impl TryFrom<&LinkSpec> for Params {
    type Error = SpecError;

    /// The spec applied over [`Params::default`].
    fn try_from(spec: &LinkSpec) -> Result<Self, SpecError> {
        spec.apply(&Params::default())
    }
}

fn parse_probability(text: &str) -> Result<Probability, String> {
    text.parse::<Probability>().map_err(|e| e.to_string())
}

fn parse_mtu(text: &str) -> Result<u32, String> {
    text.trim().parse::<u32>().map_err(|_| {
        format!(
            "`{text}` is not an MTU: write a whole number of bytes from 68 to 65535, e.g. `1500`"
        )
    })
}

/// A serde visitor for values written as text (or as a bare number, which is read as its text).
struct TextVisitor<T> {
    expecting: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> TextVisitor<T> {
    fn new(expecting: &'static str) -> Self {
        TextVisitor {
            expecting,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: FromStr<Err = String>> Visitor<'_> for TextVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

/// `Option<u32>` MTU written as a number or a string.
fn opt_mtu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    struct Mtu(u32);
    impl FromStr for Mtu {
        type Err = String;
        fn from_str(s: &str) -> Result<Self, String> {
            parse_mtu(s).map(Mtu)
        }
    }
    d.deserialize_any(TextVisitor::<Mtu>::new("an MTU in bytes"))
        .map(|m| Some(m.0))
}

/// Serde for `Option<Duration>` fields written as `"150ms"`.
mod opt_duration {
    use super::*;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        struct Dur(Duration);
        impl FromStr for Dur {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                parse_duration(s).map(Dur).map_err(|e| e.to_string())
            }
        }
        d.deserialize_any(TextVisitor::<Dur>::new("a duration such as \"150ms\""))
            .map(|d| Some(d.0))
    }
}

#[cfg(test)]
mod tests;

/// Which direction(s) of a link a change applies to: `both`, `a_to_b` (frames from interface
/// `a` to interface `b`) or `b_to_a`. Used by `headway ctl link set --dir`, `headway lab set
/// --dir` and the lab's library API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// Both directions.
    #[default]
    Both,
    /// From side a (client / branch) to side b (server / data centre).
    AToB,
    /// From side b (server / data centre) to side a (client / branch).
    BToA,
}

impl Dir {
    /// The name on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Both => "both",
            Dir::AToB => "a_to_b",
            Dir::BToA => "b_to_a",
        }
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A direction name that is none of `both`, `a_to_b`, `b_to_a`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown direction `{0}`: use both, a_to_b or b_to_a")]
pub struct UnknownDir(pub String);

impl FromStr for Dir {
    type Err = UnknownDir;
    fn from_str(s: &str) -> Result<Dir, UnknownDir> {
        match s {
            "both" => Ok(Dir::Both),
            "a_to_b" => Ok(Dir::AToB),
            "b_to_a" => Ok(Dir::BToA),
            other => Err(UnknownDir(other.to_string())),
        }
    }
}
