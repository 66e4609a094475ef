//! The classifier for HTTP monitor responses.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// What an HTTP monitor expects of a server's response.
///
/// The monitor sends its request, reads the status and (up to its own size limit) the body, and
/// asks [`HttpExpect::check`]. The default expects a status in `200-399` and any body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpExpect {
    /// The acceptable status codes.
    pub status: StatusSet,
    /// Bytes the body must contain somewhere (case-sensitive); `None` accepts any body.
    pub body_contains: Option<Vec<u8>>,
}

impl HttpExpect {
    /// Whether a response with `status` and `body` passes; if not, why.
    pub fn check(&self, status: u16, body: &[u8]) -> Result<(), CheckFailure> {
        if !self.status.contains(status) {
            return Err(CheckFailure::Status(status));
        }
        if let Some(needle) = &self.body_contains {
            if !contains(body, needle) {
                return Err(CheckFailure::BodyMissing);
            }
        }
        Ok(())
    }
}

impl Default for HttpExpect {
    fn default() -> Self {
        Self {
            status: StatusSet::from_ranges([200..=399]),
            body_contains: None,
        }
    }
}

/// Why an HTTP check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckFailure {
    /// The status code is not in the expected set.
    #[error("status {0} is not an expected status")]
    Status(u16),
    /// The body does not contain the expected bytes.
    #[error("body does not contain the expected text")]
    BodyMissing,
}

/// A set of HTTP status codes, written as a comma-separated list of codes and ranges:
/// `"200"`, `"200-399"`, `"200,204,300-399"`.
///
/// Every code must be three digits from 100 to 599; spaces around items are allowed. The set is
/// kept sorted with overlapping and adjacent ranges merged, and [`Display`](fmt::Display) writes
/// that canonical form (`"204,200-203"` displays as `"200-204"`), which parses back to the same
/// set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    /// Sorted, disjoint, non-adjacent ranges.
    ranges: Vec<RangeInclusive<u16>>,
}

impl StatusSet {
    /// The set of the codes in `ranges` (empty ranges add nothing). Codes are not checked
    /// against 100–599 here; [`FromStr`] does that for user input.
    pub fn from_ranges(ranges: impl IntoIterator<Item = RangeInclusive<u16>>) -> Self {
        let mut ranges: Vec<_> = ranges.into_iter().filter(|r| !r.is_empty()).collect();
        ranges.sort_by_key(|r| *r.start());
        let mut merged: Vec<RangeInclusive<u16>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if u32::from(*r.start()) <= u32::from(*last.end()) + 1 => {
                    *last = *last.start()..=(*last.end()).max(*r.end());
                }
                _ => merged.push(r),
            }
        }
        Self { ranges: merged }
    }

    /// Whether `status` is in the set.
    pub fn contains(&self, status: u16) -> bool {
        self.ranges.iter().any(|r| r.contains(&status))
    }

    /// The canonical ranges: sorted, disjoint and not adjacent.
    pub fn ranges(&self) -> &[RangeInclusive<u16>] {
        &self.ranges
    }
}

impl FromStr for StatusSet {
    type Err = StatusSetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            return Err(StatusSetError::Empty);
        }
        let mut ranges = Vec::new();
        for item in s.split(',') {
            let item = item.trim();
            let (start, end) = match item.split_once('-') {
                Some((a, b)) => (code(a.trim(), item)?, code(b.trim(), item)?),
                None => {
                    let c = code(item, item)?;
                    (c, c)
                }
            };
            if start > end {
                return Err(StatusSetError::Reversed(item.to_owned()));
            }
            ranges.push(start..=end);
        }
        Ok(Self::from_ranges(ranges))
    }
}

/// One status code of `item`: three digits, 100–599.
fn code(text: &str, item: &str) -> Result<u16, StatusSetError> {
    let bad = || StatusSetError::Code(item.to_owned());
    if text.len() != 3 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let c: u16 = text.parse().map_err(|_| bad())?;
    if (100..=599).contains(&c) {
        Ok(c)
    } else {
        Err(bad())
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r.start() == r.end() {
                write!(f, "{}", r.start())?;
            } else {
                write!(f, "{}-{}", r.start(), r.end())?;
            }
        }
        Ok(())
    }
}

/// Why a status set did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StatusSetError {
    /// The text is empty.
    #[error("empty status list (write e.g. \"200-399\" or \"200,204\")")]
    Empty,
    /// An item is not a status code (three digits, 100–599) or a range of two.
    #[error("{0:?} is not a status code from 100 to 599 or a range like 200-399")]
    Code(String),
    /// A range whose start is after its end.
    #[error("range {0:?} starts after it ends")]
    Reversed(String),
}

/// Whether `needle` occurs in `haystack` (an empty needle always does). Naive search: monitor
/// bodies are small and checked once per interval.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(s: &str) -> StatusSet {
        s.parse().unwrap()
    }

    #[test]
    fn parses_codes_ranges_and_lists() {
        assert_eq!(set("200").ranges(), [200..=200]);
        assert_eq!(set("200-399").ranges(), [200..=399]);
        assert_eq!(
            set(" 200 , 204,300 - 399").ranges(),
            [200..=200, 204..=204, 300..=399]
        );
        assert_eq!(set("300-399,200-299,204").ranges(), [200..=399]);
        assert_eq!(set("200,201,202").to_string(), "200-202");
        assert_eq!(set("404,200").to_string(), "200,404");
        assert!(set("200,204,300-399").contains(204));
        assert!(!set("200,204,300-399").contains(203));
    }

    #[test]
    fn rejects_bad_lists_with_the_offending_item() {
        use StatusSetError::*;
        let cases = [
            ("", Empty),
            ("  ", Empty),
            ("200,", Code(String::new())),
            ("2000", Code("2000".into())),
            ("99", Code("99".into())),
            ("600", Code("600".into())),
            ("+20", Code("+20".into())),
            ("2xx", Code("2xx".into())),
            ("200-", Code("200-".into())),
            ("200-300-400", Code("200-300-400".into())),
            ("399-200", Reversed("399-200".into())),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<StatusSet>(), Err(want), "{text:?}");
        }
        let msg = "2xx".parse::<StatusSet>().unwrap_err().to_string();
        assert!(msg.contains("\"2xx\"") && msg.contains("200-399"), "{msg}");
    }

    #[test]
    fn check_reports_why() {
        let expect = HttpExpect {
            status: set("200,204"),
            body_contains: Some(b"OK".to_vec()),
        };
        assert_eq!(expect.check(200, b"status: OK\n"), Ok(()));
        assert_eq!(expect.check(500, b"OK"), Err(CheckFailure::Status(500)));
        assert_eq!(expect.check(204, b"ok"), Err(CheckFailure::BodyMissing));
        assert_eq!(expect.check(204, b""), Err(CheckFailure::BodyMissing));
        let any = HttpExpect::default();
        assert_eq!(any.check(302, b""), Ok(()));
        assert_eq!(any.check(199, b""), Err(CheckFailure::Status(199)));
        assert_eq!(any.check(400, b""), Err(CheckFailure::Status(400)));
        let empty_needle = HttpExpect {
            body_contains: Some(Vec::new()),
            ..HttpExpect::default()
        };
        assert_eq!(empty_needle.check(200, b""), Ok(()));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "[0-9, -]{0,30}|\\PC{0,30}") {
            let _ = s.parse::<StatusSet>();
        }

        #[test]
        fn display_round_trips_and_membership_matches(
            ranges in prop::collection::vec((100u16..600, 0u16..120), 1..6),
            probe in 0u16..700,
        ) {
            let ranges: Vec<_> = ranges.into_iter().map(|(a, len)| a..=(a + len).min(599)).collect();
            let s = StatusSet::from_ranges(ranges.clone());
            let back: StatusSet = s.to_string().parse().unwrap();
            prop_assert_eq!(&back, &s);
            prop_assert_eq!(s.contains(probe), ranges.iter().any(|r| r.contains(&probe)));
        }

        #[test]
        fn body_search_matches_a_naive_oracle(hay: Vec<u8>, start: usize, len in 0usize..8) {
            if !hay.is_empty() {
                let start = start % hay.len();
                let needle = &hay[start..(start + len).min(hay.len())];
                prop_assert!(contains(&hay, needle));
            }
            // a byte the haystack lacks is never found
            if let Some(missing) = (0..=255u8).find(|b| !hay.contains(b)) {
                prop_assert!(!contains(&hay, &[missing]));
            }
        }
    }
}
