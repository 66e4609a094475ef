//! Typed quantities and their textual forms.
//!
//! | type | examples | meaning |
//! |---|---|---|
//! | [`Rate`] | `"1.5mbit"`, `"64kbit/s"`, `"10Gbps"`, `"2000000"` | bits per second (SI prefixes: k = 1000) |
//! | [`ByteSize`] | `"64KiB"`, `"1.5MB"`, `"1500"` | bytes (KiB = 1024, kB = 1000) |
//! | [`Probability`] | `"1%"`, `"0.01"`, `"0.05%"` | a probability in `[0, 1]` |
//! | durations | `"300ms"`, `"1.5s"`, `"250us"`, `"0"` | [`parse_duration`] |
//!
//! Parsing is case-insensitive for the unit and tolerant of a space between number and unit.
//! All types serialise back to a canonical string that parses to the same value.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a quantity could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// The text has no number where one is needed.
    #[error("`{text}` is not a {what}: expected a number followed by a unit, e.g. {example}")]
    Malformed {
        /// The offending text.
        text: String,
        /// What kind of quantity was expected.
        what: &'static str,
        /// An example of a valid value.
        example: &'static str,
    },
    /// The unit is not one this quantity knows.
    #[error("`{text}`: unknown unit `{unit}` for a {what}; use one of {known}")]
    UnknownUnit {
        /// The offending text.
        text: String,
        /// The unit found.
        unit: String,
        /// What kind of quantity was expected.
        what: &'static str,
        /// The units accepted.
        known: &'static str,
    },
    /// The value is outside the range this quantity allows.
    #[error("`{text}` is out of range for a {what}: {why}")]
    OutOfRange {
        /// The offending text.
        text: String,
        /// What kind of quantity was expected.
        what: &'static str,
        /// The range allowed.
        why: &'static str,
    },
}

/// A non-negative decimal number exactly as written: `int.frac` with `frac_digits` digits after
/// the point. Parsed without floating point so that large integers (byte counts, nanoseconds)
/// survive a text round trip exactly.
#[derive(Debug, Clone, Copy)]
struct Decimal {
    int: u128,
    frac: u128,
    frac_digits: u32,
}

impl Decimal {
    /// `self × mult`, rounded half up to an integer; `None` on overflow.
    fn scale(self, mult: u128) -> Option<u128> {
        let whole = self.int.checked_mul(mult)?;
        if self.frac_digits == 0 {
            return Some(whole);
        }
        let den = 10u128.checked_pow(self.frac_digits)?;
        let part = self.frac.checked_mul(mult)?.checked_add(den / 2)? / den;
        whole.checked_add(part)
    }

    fn as_f64(self) -> f64 {
        let den = 10f64.powi(self.frac_digits as i32);
        self.int as f64 + self.frac as f64 / den
    }
}

/// Splits `"1.5 mbit"` into `(1.5, "mbit")`; `_` may group digits. `None` if there is no number
/// or it has more than 30 digits on either side of the point.
fn split_number(text: &str) -> Option<(Decimal, &str)> {
    let t = text.trim();
    let end = t
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num.as_str(), ""),
    };
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') || int.len() > 30 {
        return None;
    }
    // Digits beyond 30 after the point cannot change any value we represent: drop them.
    let frac = &frac[..frac.len().min(30)];
    let parse = |d: &str| -> Option<u128> {
        if d.is_empty() {
            Some(0)
        } else {
            d.parse().ok()
        }
    };
    Some((
        Decimal {
            int: parse(int)?,
            frac: parse(frac)?,
            frac_digits: frac.len() as u32,
        },
        unit.trim(),
    ))
}

/// A data rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(u64);

impl Rate {
    /// A rate of `bps` bits per second.
    pub const fn from_bps(bps: u64) -> Self {
        Rate(bps)
    }
    /// A rate of `k` kilobits (1000 bits) per second.
    pub const fn from_kbps(k: u64) -> Self {
        Rate(k * 1_000)
    }
    /// A rate of `m` megabits (10^6 bits) per second.
    pub const fn from_mbps(m: u64) -> Self {
        Rate(m * 1_000_000)
    }
    /// Bits per second.
    pub const fn bps(self) -> u64 {
        self.0
    }
    /// Bytes per second, as a float.
    pub fn bytes_per_sec(self) -> f64 {
        self.0 as f64 / 8.0
    }
    /// The time it takes to serialise `bytes` at this rate; `None` for a zero rate.
    pub fn transmit_time(self, bytes: u64) -> Option<Duration> {
        if self.0 == 0 {
            return None;
        }
        // ns = bytes * 8 * 1e9 / bps, in u128 to avoid overflow; rounds to nearest ns
        let ns =
            (u128::from(bytes) * 8 * 1_000_000_000 + u128::from(self.0) / 2) / u128::from(self.0);
        Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }
}

impl FromStr for Rate {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Self, UnitError> {
        const WHAT: &str = "rate";
        const KNOWN: &str = "bit, kbit, mbit, gbit (optionally with /s), bps, kbps, mbps, gbps";
        let (v, unit) = split_number(text).ok_or_else(|| UnitError::Malformed {
            text: text.into(),
            what: WHAT,
            example: "`1.5mbit`",
        })?;
        let u = unit.to_ascii_lowercase();
        let u = u.strip_suffix("/s").unwrap_or(&u);
        let mult: u128 = match u {
            "" | "bit" | "bps" | "b/s" => 1,
            "k" | "kbit" | "kbps" | "kb/s" => 1_000,
            "m" | "mbit" | "mbps" | "mb/s" => 1_000_000,
            "g" | "gbit" | "gbps" | "gb/s" => 1_000_000_000,
            _ => {
                return Err(UnitError::UnknownUnit {
                    text: text.into(),
                    unit: unit.into(),
                    what: WHAT,
                    known: KNOWN,
                })
            }
        };
        match v.scale(mult) {
            Some(bps @ 1..=1_000_000_000_000) => Ok(Rate(bps as u64)),
            _ => Err(UnitError::OutOfRange {
                text: text.into(),
                what: WHAT,
                why: "must be between 1 bit/s and 1 Tbit/s",
            }),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1_000_000_000 && b % 1_000_000 == 0 {
            write!(f, "{}gbit", fmt_scaled(b, 1_000_000_000))
        } else if b >= 1_000_000 && b % 1_000 == 0 {
            write!(f, "{}mbit", fmt_scaled(b, 1_000_000))
        } else if b >= 1_000 {
            write!(f, "{}kbit", fmt_scaled(b, 1_000))
        } else {
            write!(f, "{b}bit")
        }
    }
}

/// `value / unit` as the shortest exact decimal (e.g. 1_544_000 / 1e6 → "1.544").
fn fmt_scaled(value: u64, unit: u64) -> String {
    let whole = value / unit;
    let mut frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let mut digits = String::new();
    let mut scale = unit;
    while frac != 0 && scale > 1 {
        scale /= 10;
        digits.push(char::from(b'0' + (frac / scale) as u8));
        frac %= scale;
    }
    format!("{whole}.{digits}")
}

/// An amount of data in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(u64);

impl ByteSize {
    /// `n` bytes.
    pub const fn new(n: u64) -> Self {
        ByteSize(n)
    }
    /// The number of bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Self, UnitError> {
        const WHAT: &str = "size";
        let (v, unit) = split_number(text).ok_or_else(|| UnitError::Malformed {
            text: text.into(),
            what: WHAT,
            example: "`64KiB`",
        })?;
        let mult: u128 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" | "byte" | "bytes" => 1,
            "k" | "kb" => 1_000,
            "m" | "mb" => 1_000_000,
            "g" | "gb" => 1_000_000_000,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            _ => {
                return Err(UnitError::UnknownUnit {
                    text: text.into(),
                    unit: unit.into(),
                    what: WHAT,
                    known: "B, kB, MB, GB, KiB, MiB, GiB",
                })
            }
        };
        match v.scale(mult) {
            Some(n) if n <= 1_000_000_000_000_000_000 => Ok(ByteSize(n as u64)),
            _ => Err(UnitError::OutOfRange {
                text: text.into(),
                what: WHAT,
                why: "must be at most 1 EB",
            }),
        }
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        const GI: u64 = 1 << 30;
        const MI: u64 = 1 << 20;
        const KI: u64 = 1 << 10;
        if b >= GI && b % GI == 0 {
            write!(f, "{}GiB", b / GI)
        } else if b >= MI && b % MI == 0 {
            write!(f, "{}MiB", b / MI)
        } else if b >= KI && b % KI == 0 {
            write!(f, "{}KiB", b / KI)
        } else {
            write!(f, "{b}B")
        }
    }
}

/// A probability in `[0, 1]`, written as a percentage (`"1%"`) or a fraction (`"0.01"`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Probability(f64);

impl Probability {
    /// Probability zero.
    pub const ZERO: Probability = Probability(0.0);

    /// `p` if it lies in `[0, 1]`.
    pub fn new(p: f64) -> Option<Self> {
        (0.0..=1.0).contains(&p).then_some(Probability(p))
    }
    /// The probability as a fraction in `[0, 1]`.
    pub const fn value(self) -> f64 {
        self.0
    }
    /// Whether this is exactly zero.
    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }
}

impl FromStr for Probability {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Self, UnitError> {
        const WHAT: &str = "probability";
        let (v, unit) = split_number(text).ok_or_else(|| UnitError::Malformed {
            text: text.into(),
            what: WHAT,
            example: "`1%` or `0.01`",
        })?;
        let v = v.as_f64();
        let p = match unit {
            "%" => v / 100.0,
            "" => v,
            _ => {
                return Err(UnitError::UnknownUnit {
                    text: text.into(),
                    unit: unit.into(),
                    what: WHAT,
                    known: "`%` or none (a fraction)",
                })
            }
        };
        Probability::new(p).ok_or_else(|| UnitError::OutOfRange {
            text: text.into(),
            what: WHAT,
            why: "must be between 0% and 100%",
        })
    }
}

impl fmt::Display for Probability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // percent with up to 6 significant decimals, trailing zeros trimmed
        let s = format!("{:.6}", self.0 * 100.0);
        let s = s.trim_end_matches('0').trim_end_matches('.');
        write!(f, "{s}%")
    }
}

/// Parses a duration such as `"300ms"`, `"1.5s"`, `"250us"`, `"2m"` or `"0"`.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    const WHAT: &str = "duration";
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let (v, unit) = split_number(t).ok_or_else(|| UnitError::Malformed {
        text: text.into(),
        what: WHAT,
        example: "`300ms`",
    })?;
    let ns_per_unit: u128 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(UnitError::UnknownUnit {
                text: text.into(),
                unit: unit.into(),
                what: WHAT,
                known: "ns, us, ms, s, min, h",
            })
        }
    };
    match v.scale(ns_per_unit) {
        Some(ns) if ns <= 1_000_000_000 * 1_000_000_000 => Ok(Duration::from_nanos(ns as u64)),
        _ => Err(UnitError::OutOfRange {
            text: text.into(),
            what: WHAT,
            why: "must be between 0 and about 30 years",
        }),
    }
}

/// Formats a duration in the form [`parse_duration`] reads back (`"1.5ms"`, `"300ms"`, `"2s"`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0".into()
    } else if ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns % 1_000 == 0 {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

macro_rules! string_serde {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = StrOrNum::deserialize(d)?;
                v.text().parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(Rate);
string_serde!(ByteSize);
string_serde!(Probability);

/// A config value written either as a string or as a bare number.
#[derive(Deserialize)]
#[serde(untagged)]
enum StrOrNum {
    S(String),
    U(u64),
    F(f64),
}

impl StrOrNum {
    fn text(&self) -> String {
        match self {
            StrOrNum::S(s) => s.clone(),
            StrOrNum::U(u) => u.to_string(),
            StrOrNum::F(f) => f.to_string(),
        }
    }
}

/// Serde helpers for `Duration` fields written as `"300ms"`: use
/// `#[serde(with = "headway_core::units::duration_serde")]`.
pub mod duration_serde {
    use super::*;

    /// Serialises as the canonical string.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    /// Deserialises from a string such as `"300ms"`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = StrOrNum::deserialize(d)?;
        parse_duration(&v.text()).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rates_parse_in_the_forms_users_write() {
        assert_eq!("1.5mbit".parse::<Rate>().unwrap().bps(), 1_500_000);
        assert_eq!("64 kbit/s".parse::<Rate>().unwrap().bps(), 64_000);
        assert_eq!("1.544Mbps".parse::<Rate>().unwrap().bps(), 1_544_000);
        assert_eq!("51.84mbit".parse::<Rate>().unwrap().bps(), 51_840_000);
        assert_eq!("10gbit".parse::<Rate>().unwrap().bps(), 10_000_000_000);
        assert_eq!("2000".parse::<Rate>().unwrap().bps(), 2000);
        assert!(matches!(
            "fast".parse::<Rate>(),
            Err(UnitError::Malformed { .. })
        ));
        assert!(matches!(
            "5 furlongs".parse::<Rate>(),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            "0mbit".parse::<Rate>(),
            Err(UnitError::OutOfRange { .. })
        ));
    }

    #[test]
    fn rate_display_is_exact() {
        assert_eq!(Rate::from_bps(1_544_000).to_string(), "1.544mbit");
        assert_eq!(Rate::from_bps(64_000).to_string(), "64kbit");
        assert_eq!(Rate::from_bps(100_000_000).to_string(), "100mbit");
    }

    #[test]
    fn transmit_time_is_exact() {
        let r = Rate::from_mbps(100);
        assert_eq!(r.transmit_time(1500).unwrap(), Duration::from_micros(120));
        assert_eq!(
            Rate::from_kbps(64).transmit_time(8000).unwrap(),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn sizes_probabilities_and_durations_parse() {
        assert_eq!("64KiB".parse::<ByteSize>().unwrap().bytes(), 65536);
        assert_eq!("1.5MB".parse::<ByteSize>().unwrap().bytes(), 1_500_000);
        assert_eq!("1%".parse::<Probability>().unwrap().value(), 0.01);
        assert_eq!("0.05%".parse::<Probability>().unwrap().value(), 0.0005);
        assert!("120%".parse::<Probability>().is_err());
        assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("300").is_err(), "a bare number has no unit");
        // found by fuzzing: integers beyond 2^53 must not go through f64
        assert_eq!(
            parse_duration("2251799813685252ns").unwrap().as_nanos(),
            2251799813685252
        );
        assert_eq!(
            "9007199254740993B".parse::<ByteSize>().unwrap().bytes(),
            9007199254740993
        );
        assert_eq!(
            "1.0000000000000000001mbit".parse::<Rate>().unwrap().bps(),
            1_000_000
        );
        assert!(".".parse::<Rate>().is_err() && "1.2.3mbit".parse::<Rate>().is_err());
    }

    proptest! {
        #[test]
        fn rate_round_trips(bps in 1u64..1_000_000_000_000) {
            let r = Rate::from_bps(bps);
            prop_assert_eq!(r.to_string().parse::<Rate>().unwrap(), r);
        }

        #[test]
        fn size_round_trips(n in 0u64..=1_000_000_000_000_000_000) {
            let s = ByteSize::new(n);
            prop_assert_eq!(s.to_string().parse::<ByteSize>().unwrap(), s);
        }

        #[test]
        fn duration_round_trips(ns in 0u64..=1_000_000_000_000_000_000) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }

        #[test]
        fn parsers_never_panic(s in ".{0,24}") {
            let _ = s.parse::<Rate>();
            let _ = s.parse::<ByteSize>();
            let _ = s.parse::<Probability>();
            let _ = parse_duration(&s);
        }
    }
}
