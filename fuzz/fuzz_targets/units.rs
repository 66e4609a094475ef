//! Arbitrary text through every unit parser of `headway-core`.
//!
//! Properties, for every input that parses:
//! - `Rate`, `ByteSize` and durations: the canonical text reads back to the same value
//!   (`parse(display(parse(s))) == parse(s)`), and the value is inside the documented range.
//! - `Probability`: its text keeps 6 decimals of percent, so one round trip may move the value
//!   by up to half a unit in the last place (5e-9). After that one normalisation the text form is
//!   a fixed point: `parse(display(q)) == q` and `display(q) == display(p)`.
//!
//! And for every input that does not parse: the error message is not empty and quotes the
//! input, so users see what was rejected.
//!
//! The first 8 bytes, read as a number, also drive the other direction, `decode(encode(x)) ==
//! x` for every value the parsers can produce (random text rarely spells large exact numbers):
//! a rate of 1 bit/s to 1 Tbit/s, a size up to 1 EB, a duration up to 1e9 s and any probability
//! in `[0, 1]` (within rounding, then exactly).
#![no_main]

use std::time::Duration;

use headway_core::units::{format_duration, parse_duration, UnitError};
use headway_core::{ByteSize, Probability, Rate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        rate(text);
        byte_size(text);
        probability(text);
        duration(text);
    }
    if let Some(head) = data.first_chunk::<8>() {
        values(u64::from_le_bytes(*head));
    }
});

/// Values built from `n`, each within what its parser accepts, shown and read back.
fn values(n: u64) {
    let r = Rate::from_bps(n % 1_000_000_000_000 + 1);
    assert_eq!(r.to_string().parse::<Rate>(), Ok(r), "{r:?} shown as {r}");

    let b = ByteSize::new(n % (1_000_000_000_000_000_000 + 1));
    assert_eq!(
        b.to_string().parse::<ByteSize>(),
        Ok(b),
        "{b:?} shown as {b}"
    );

    let d = Duration::from_nanos(n % (1_000_000_000_000_000_000 + 1));
    let shown = format_duration(d);
    assert_eq!(parse_duration(&shown), Ok(d), "{d:?} shown as {shown:?}");

    // [0, 1) in steps of 2^-53, and 1 itself.
    let fraction = if n == u64::MAX {
        1.0
    } else {
        (n >> 11) as f64 / (1u64 << 53) as f64
    };
    let p = Probability::new(fraction).expect("a fraction in [0, 1]");
    let shown = p.to_string();
    let q = shown
        .parse::<Probability>()
        .unwrap_or_else(|e| panic!("{} shown as {shown:?}, which fails: {e}", p.value()));
    assert!(
        (q.value() - p.value()).abs() <= 5e-9 + f64::EPSILON,
        "{} shown as {shown:?} = {}: moved by more than rounding",
        p.value(),
        q.value()
    );
    // ... and from there on, a fixed point.
    probability(&shown);
}

fn rate(text: &str) {
    match text.parse::<Rate>() {
        Ok(r) => {
            assert!(
                (1..=1_000_000_000_000).contains(&r.bps()),
                "{text:?} parsed to {} bit/s, outside 1 bit/s..1 Tbit/s",
                r.bps()
            );
            let shown = r.to_string();
            assert_eq!(shown.parse::<Rate>(), Ok(r), "{text:?} shown as {shown:?}");
        }
        Err(e) => check_error(text, &e),
    }
}

fn byte_size(text: &str) {
    match text.parse::<ByteSize>() {
        Ok(b) => {
            assert!(
                b.bytes() <= 1_000_000_000_000_000_000,
                "{text:?} parsed to {} bytes, above 1 EB",
                b.bytes()
            );
            let shown = b.to_string();
            assert_eq!(
                shown.parse::<ByteSize>(),
                Ok(b),
                "{text:?} shown as {shown:?}"
            );
        }
        Err(e) => check_error(text, &e),
    }
}

fn probability(text: &str) {
    match text.parse::<Probability>() {
        Ok(p) => {
            assert!(
                (0.0..=1.0).contains(&p.value()),
                "{text:?} parsed to {}",
                p.value()
            );
            let shown = p.to_string();
            let q = shown
                .parse::<Probability>()
                .unwrap_or_else(|e| panic!("{text:?} shown as {shown:?}, which fails: {e}"));
            // Display rounds to 1e-6 percent, i.e. 1e-8 as a fraction.
            assert!(
                (q.value() - p.value()).abs() <= 5e-9 + f64::EPSILON,
                "{text:?} = {} shown as {shown:?} = {}: moved by more than rounding",
                p.value(),
                q.value()
            );
            let shown_again = q.to_string();
            assert_eq!(
                shown_again, shown,
                "{text:?}: the text form is not a fixed point"
            );
            assert_eq!(
                shown_again.parse::<Probability>(),
                Ok(q),
                "{text:?}: {shown_again:?} does not read back to {}",
                q.value()
            );
        }
        Err(e) => check_error(text, &e),
    }
}

fn duration(text: &str) {
    match parse_duration(text) {
        Ok(d) => {
            // The documented range is 0 to 1e9 s.
            assert!(d.as_secs() <= 1_000_000_000, "{text:?} parsed to {d:?}");
            let shown = format_duration(d);
            assert_eq!(
                parse_duration(&shown),
                Ok(d),
                "{text:?} = {d:?} shown as {shown:?}"
            );
        }
        Err(e) => check_error(text, &e),
    }
}

fn check_error(text: &str, e: &UnitError) {
    let msg = e.to_string();
    assert!(!msg.is_empty(), "{text:?}: empty error message");
    assert!(
        msg.contains(&format!("`{text}`")),
        "{text:?}: the message does not quote the input: {msg}"
    );
}
