//! Arbitrary text through the link spec parser of `headway-config`.
//!
//! Properties, mirroring the crate's own property tests (`headway-config/src/spec/tests.rs`):
//! - a spec that parses prints back to text that parses; probabilities keep 6 decimals of
//!   percent in that text, so the spec read back is the original with each probability
//!   rounded once, and from then on text and spec are a fixed point;
//! - applying the spec (`Params::try_from`) never panics; when it succeeds, the full spec of
//!   the parameters (`LinkSpec::from(&params)`) gives the same parameters, directly and
//!   through its text;
//! - `merged` is "apply one, then the other" whenever both applications succeed.
//!
//! The input is split at its first newline into two specs for the `merged` check; the whole
//! input is also parsed as one spec (the parser treats newlines as separators).
#![no_main]

use headway_config::{LinkSpec, LossSpec};
use headway_core::Probability;
use headway_link::Params;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let whole = round_trip(text);
    if let Some((first, second)) = text.split_once('\n') {
        if let (Some(a), Some(b)) = (round_trip(first), round_trip(second)) {
            merged_is_apply_then_apply(&a, &b);
        }
    } else if let Some(s) = whole {
        merged_is_apply_then_apply(&s, &s);
    }
});

/// Checks the text and params round trips of `text`; the parsed spec, if it parses.
fn round_trip(text: &str) -> Option<LinkSpec> {
    let spec = match text.parse::<LinkSpec>() {
        Ok(s) => s,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "{text:?}: empty error message");
            return None;
        }
    };

    // Text round trip, after rounding probabilities once.
    let shown = spec.to_string();
    let back = shown
        .parse::<LinkSpec>()
        .unwrap_or_else(|e| panic!("{text:?} shown as {shown:?}, which fails: {e}"));
    let rounded = rounded(&spec);
    assert_eq!(back, rounded, "{text:?} shown as {shown:?}");
    assert_eq!(
        back.to_string(),
        shown,
        "{text:?}: the text form is not a fixed point"
    );
    assert_eq!(
        back.is_empty(),
        shown.is_empty(),
        "{text:?}: only the empty spec shows as nothing"
    );

    // Params round trip. Applying must not panic; whether it succeeds must not depend on the
    // rounding of probabilities (every probability in [0, 1] is valid).
    let params = Params::try_from(&spec);
    let params_rounded = Params::try_from(&rounded);
    assert_eq!(
        params.is_ok(),
        params_rounded.is_ok(),
        "{text:?}: applies as {params:?} but rounded as {params_rounded:?}"
    );
    if let Ok(p) = params {
        let full = LinkSpec::from(&p);
        assert_eq!(
            Params::try_from(&full).as_ref(),
            Ok(&p),
            "{text:?}: the full spec {full:?} of {p:?} does not apply back"
        );
        // ... and through its text, as `headway ctl` shows it.
        let full_shown = full.to_string();
        let full_back = full_shown
            .parse::<LinkSpec>()
            .unwrap_or_else(|e| panic!("{text:?}: full spec {full_shown:?} fails: {e}"));
        assert_eq!(
            Params::try_from(&full_back),
            params_rounded,
            "{text:?}: full spec {full_shown:?}"
        );
    }
    Some(spec)
}

/// `a.merged(b)` applied over the defaults equals `a` then `b`, when both steps succeed.
fn merged_is_apply_then_apply(a: &LinkSpec, b: &LinkSpec) {
    let base = Params::default();
    let Ok(after_a) = a.apply(&base) else {
        return;
    };
    let Ok(after_b) = b.apply(&after_a) else {
        return;
    };
    assert_eq!(
        a.merged(b).apply(&base).as_ref(),
        Ok(&after_b),
        "{a} merged with {b}"
    );
}

/// `spec` with every probability replaced by what its text reads back as.
fn rounded(spec: &LinkSpec) -> LinkSpec {
    let loss = spec.loss.map(|l| match l {
        LossSpec::Bernoulli(p) => LossSpec::Bernoulli(round(p)),
        LossSpec::GilbertElliott { p, r, bad, good } => LossSpec::GilbertElliott {
            p: round(p),
            r: round(r),
            bad: round(bad),
            good: round(good),
        },
        other => other,
    });
    LinkSpec {
        loss,
        duplicate: spec.duplicate.map(round),
        reorder: spec.reorder.map(round),
        ..spec.clone()
    }
}

fn round(p: Probability) -> Probability {
    let shown = p.to_string();
    shown
        .parse()
        .unwrap_or_else(|e| panic!("probability {} shown as {shown:?} fails: {e}", p.value()))
}
