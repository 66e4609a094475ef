use super::*;
use proptest::prelude::*;

fn prob(s: &str) -> Probability {
    s.parse().unwrap()
}

fn spec(s: &str) -> LinkSpec {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

#[test]
fn the_documented_example_parses_to_the_right_values() {
    let s = spec(
        "rate=1.5mbit delay=150ms jitter=5ms jitter_dist=normal loss=1% queue=100 \
         queue_bytes=64KiB mtu=1500 overhead=ethernet duplicate=0.1% reorder=1% reorder_gap=5ms",
    );
    assert_eq!(s.rate, Some(Limit::At(Rate::from_bps(1_500_000))));
    assert_eq!(s.delay, Some(Duration::from_millis(150)));
    assert_eq!(s.jitter, Some(Duration::from_millis(5)));
    assert_eq!(s.jitter_dist, Some(JitterDist::Normal));
    assert_eq!(s.loss, Some(LossSpec::Bernoulli(prob("1%"))));
    assert_eq!(s.queue, Some(Limit::At(100)));
    assert_eq!(s.queue_bytes, Some(Limit::At(ByteSize::new(65536))));
    assert_eq!(s.mtu, Some(1500));
    assert_eq!(s.overhead, Some(Overhead(ETHERNET_OVERHEAD)));
    assert_eq!(s.duplicate, Some(prob("0.1%")));
    assert_eq!(s.reorder, Some(prob("1%")));
    assert_eq!(s.reorder_gap, Some(Duration::from_millis(5)));

    let p = Params::try_from(&s).unwrap();
    assert_eq!(p.rate, Some(Rate::from_bps(1_500_000)));
    assert_eq!(p.overhead, 24);
    assert_eq!(p.jitter.distribution, JitterDistribution::Normal);
    assert_eq!(
        p.queue,
        QueueLimit {
            packets: Some(100),
            bytes: Some(65536)
        }
    );
    assert_eq!(
        p.reorder,
        Reorder {
            probability: prob("1%"),
            gap: Duration::from_millis(5)
        }
    );
}

#[test]
fn commas_and_spaces_both_separate_pairs() {
    assert_eq!(spec("rate=1mbit,delay=5ms"), spec("rate=1mbit  delay=5ms"));
    assert_eq!(
        spec(" , rate=1mbit ,, delay=5ms\t"),
        spec("rate=1mbit delay=5ms")
    );
    assert!(spec("").is_empty());
    assert!(spec("  ").is_empty());
}

#[test]
fn unlimited_and_none_switch_limits_off() {
    let base = Params::try_from(&spec("rate=1mbit queue=10 queue_bytes=1MB")).unwrap();
    for word in ["none", "unlimited", "Unlimited"] {
        let p = spec(&format!("rate={word} queue={word} queue_bytes={word}"))
            .apply(&base)
            .unwrap();
        assert_eq!(p.rate, None);
        assert_eq!(
            p.queue,
            QueueLimit {
                packets: None,
                bytes: None
            }
        );
    }
    assert_eq!(spec("overhead=none").overhead, Some(Overhead(0)));
    assert_eq!(spec("overhead=38").overhead, Some(Overhead(38)));
}

#[test]
fn gilbert_elliott_is_written_after_loss_ge() {
    let want = LossSpec::GilbertElliott {
        p: prob("1%"),
        r: prob("30%"),
        bad: prob("90%"),
        good: prob("0.1%"),
    };
    let s = spec("delay=5ms loss=ge:p=1%,r=30%,bad=90%,good=0.1% rate=1mbit");
    assert_eq!(s.loss, Some(want));
    assert_eq!(s.delay, Some(Duration::from_millis(5)));
    assert_eq!(s.rate, Some(Limit::At(Rate::from_kbps(1000))));
    // Commas may also separate the link keys after it.
    let s = spec("loss=ge:p=1%,r=30%,bad=90%,good=0.1%,delay=5ms");
    assert_eq!(s.loss, Some(want));
    assert_eq!(s.delay, Some(Duration::from_millis(5)));
    // bad defaults to 100%, good to 0%.
    assert_eq!(
        spec("loss=ge:p=1%,r=30%").loss,
        Some(LossSpec::GilbertElliott {
            p: prob("1%"),
            r: prob("30%"),
            bad: prob("100%"),
            good: Probability::ZERO
        })
    );
    let p = Params::try_from(&spec("loss=ge:p=1%,r=30%,bad=90%,good=0.1%")).unwrap();
    assert_eq!(
        p.loss,
        Loss::GilbertElliott {
            p: prob("1%"),
            r: prob("30%"),
            loss_good: prob("0.1%"),
            loss_bad: prob("90%")
        }
    );
    assert_eq!(spec("loss=none").loss, Some(LossSpec::None));
}

#[test]
fn gilbert_elliott_mistakes_are_explained() {
    let e = "loss=ge:p=1%".parse::<LinkSpec>().unwrap_err().to_string();
    assert!(
        e.contains("needs both `p`") && e.contains("`r` (Bad→Good)"),
        "{e}"
    );
    let e = "delay=5ms p=1%".parse::<LinkSpec>().unwrap_err();
    assert_eq!(
        e,
        SpecError::StrayLossParameter {
            piece: "p=1%".into()
        }
    );
    let e = "loss=ge:p=1%,q=3%"
        .parse::<LinkSpec>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`q`") && e.contains("not a Gilbert–Elliott parameter"),
        "{e}"
    );
    let e = "loss=ge:p=1%,r=2%,p=3%"
        .parse::<LinkSpec>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("`p` is given twice"), "{e}");
    let e = "loss=ge:p=1%,r=2% loss=1%".parse::<LinkSpec>().unwrap_err();
    assert_eq!(e, SpecError::Duplicate { key: "loss" });
    let e = "loss=ge:p=1%,r=200%"
        .parse::<LinkSpec>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ge r:") && e.contains("between 0% and 100%"),
        "{e}"
    );
}

#[test]
fn errors_name_the_key_and_what_to_write() {
    let e = "rate=1mbit dly=5ms".parse::<LinkSpec>().unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown key `dly` (did you mean `delay`?); known keys: rate, overhead, delay, jitter, \
         jitter_dist, loss, duplicate, reorder, reorder_gap, queue, queue_bytes, mtu"
    );
    let e = "bandwidth=5".parse::<LinkSpec>().unwrap_err().to_string();
    assert!(
        e.starts_with("unknown key `bandwidth`; known keys: rate,"),
        "{e}"
    );

    let e = "rate=fast".parse::<LinkSpec>().unwrap_err().to_string();
    assert!(e.starts_with("rate: `fast` is not a rate"), "{e}");
    assert!(e.contains("`unlimited`"), "{e}");
    let e = "rate=1.5mbits".parse::<LinkSpec>().unwrap_err().to_string();
    assert!(
        e.contains("unknown unit `mbits`") && e.contains("mbit"),
        "{e}"
    );
    let e = "delay=150".parse::<LinkSpec>().unwrap_err().to_string();
    assert!(e.starts_with("delay: `150`"), "{e}");
    let e = "queue=lots".parse::<LinkSpec>().unwrap_err().to_string();
    assert!(
        e.contains("not a packet count") && e.contains("`100`"),
        "{e}"
    );
    let e = "jitter_dist=pareto"
        .parse::<LinkSpec>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("`uniform` or `normal`"), "{e}");
    let e = "mtu=big".parse::<LinkSpec>().unwrap_err().to_string();
    assert!(e.contains("not an MTU"), "{e}");
    let e = "overhead=ether"
        .parse::<LinkSpec>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("`ethernet`"), "{e}");

    assert_eq!(
        "delay".parse::<LinkSpec>().unwrap_err().to_string(),
        "delay: no value: write `delay=VALUE`"
    );
    assert_eq!(
        "fast".parse::<LinkSpec>().unwrap_err(),
        SpecError::NotAPair {
            piece: "fast".into()
        }
    );
    assert_eq!(
        "delay=1ms delay=2ms".parse::<LinkSpec>().unwrap_err(),
        SpecError::Duplicate { key: "delay" }
    );
}

#[test]
fn apply_changes_only_the_keys_given_and_validates() {
    let base = Params::try_from(&spec("rate=10mbit delay=20ms loss=1% queue=50")).unwrap();
    let p = spec("delay=30ms").apply(&base).unwrap();
    assert_eq!(
        p,
        Params {
            delay: Duration::from_millis(30),
            ..base.clone()
        }
    );
    assert_eq!(spec("").apply(&base).unwrap(), base);

    assert_eq!(
        spec("mtu=20").apply(&base),
        Err(SpecError::Invalid(ParamsError::Mtu(20)))
    );
    assert_eq!(
        spec("queue=0").apply(&base),
        Err(SpecError::Invalid(ParamsError::ZeroQueue))
    );
    assert_eq!(
        spec("delay=61s").apply(&base),
        Err(SpecError::Invalid(ParamsError::Delay(Duration::from_secs(
            61
        ))))
    );
    assert_eq!(
        spec("mtu=20").apply(&base).unwrap_err().to_string(),
        "mtu 20 is out of range: use 68 to 65535 bytes"
    );
}

#[test]
fn merged_is_apply_then_apply() {
    let a = spec("rate=1mbit delay=5ms loss=1%");
    let b = spec("delay=7ms mtu=1400");
    let m = a.merged(&b);
    assert_eq!(m, spec("rate=1mbit delay=7ms loss=1% mtu=1400"));
    let base = Params::default();
    assert_eq!(m.apply(&base), b.apply(&a.apply(&base).unwrap()));
}

#[test]
fn display_writes_keys_in_a_fixed_order() {
    let s = spec("mtu=1400 loss=ge:p=1%,r=30% rate=1.5mbit overhead=ethernet queue=none");
    assert_eq!(
        s.to_string(),
        "rate=1.5mbit overhead=ethernet loss=ge:p=1%,r=30%,bad=100%,good=0% queue=unlimited \
         mtu=1400"
    );
    assert_eq!(
        LinkSpec::from(&Params::default()).to_string(),
        "rate=unlimited overhead=0 delay=0 jitter=0 jitter_dist=uniform loss=none duplicate=0% \
         reorder=0% reorder_gap=0 queue=1000 queue_bytes=unlimited mtu=1500"
    );
}

#[test]
fn serde_reads_tables_and_text_and_rejects_unknown_fields() {
    let json = r#"{"rate": "1.5mbit", "delay": "150ms", "queue": 100, "mtu": 1400,
                   "loss": {"p": "1%", "r": "30%"}, "duplicate": 0.001}"#;
    let s: LinkSpec = serde_json::from_str(json).unwrap();
    assert_eq!(
        s,
        spec("rate=1.5mbit delay=150ms queue=100 mtu=1400 loss=ge:p=1%,r=30% duplicate=0.1%")
    );
    let e = serde_json::from_str::<LinkSpec>(r#"{"dely": "5ms"}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `dely`"), "{e}");
    let e = serde_json::from_str::<LinkSpec>(r#"{"delay": "5"}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`5`"), "{e}");

    let i: LinkSpecInput = serde_json::from_str(r#""rate=1mbit delay=5ms""#).unwrap();
    assert_eq!(i.0, spec("rate=1mbit delay=5ms"));
    let i: LinkSpecInput = serde_json::from_str(r#"{"rate": "1mbit", "delay": "5ms"}"#).unwrap();
    assert_eq!(i.0, spec("rate=1mbit delay=5ms"));
    let e = serde_json::from_str::<LinkSpecInput>(r#""rate=1mbit dly=5ms""#).unwrap_err();
    assert!(e.to_string().contains("did you mean `delay`"), "{e}");
    assert!(serde_json::from_str::<LinkSpecInput>("5").is_err());

    // Serialised as a table of strings; empty keys are left out.
    let v = serde_json::to_value(spec("rate=1mbit delay=5ms queue=10")).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"rate": "1mbit", "delay": "5ms", "queue": "10"})
    );
}

#[test]
fn changes_from_the_default_are_the_short_form() {
    let p = Params {
        rate: Some(Rate::from_bps(1_500_000)),
        delay: Duration::from_millis(150),
        loss: Loss::Bernoulli(prob("1%")),
        queue: QueueLimit {
            packets: Some(50),
            bytes: None,
        },
        ..Params::default()
    };
    let short = LinkSpec::changes(&Params::default(), &p);
    assert_eq!(
        short.to_string(),
        "rate=1.5mbit delay=150ms loss=1% queue=50"
    );
    assert_eq!(Params::try_from(&short), Ok(p.clone()));
    // Going back to the default names the same keys with the default's values.
    assert_eq!(
        LinkSpec::changes(&p, &Params::default()).to_string(),
        "rate=unlimited delay=0 loss=none queue=1000"
    );
    assert!(LinkSpec::changes(&p, &p).is_empty());
}

/// A probability whose text form reads back exactly (the text form keeps 6 decimals of percent).
fn any_probability() -> impl Strategy<Value = Probability> {
    (0u64..=100_000_000).prop_map(|k| {
        let p = Probability::new(k as f64 / 1e8).unwrap();
        p.to_string().parse().unwrap()
    })
}

fn any_duration() -> impl Strategy<Value = Duration> {
    (0u64..=60_000_000_000).prop_map(Duration::from_nanos)
}

fn any_loss() -> impl Strategy<Value = LossSpec> {
    prop_oneof![
        Just(LossSpec::None),
        any_probability().prop_map(LossSpec::Bernoulli),
        (
            any_probability(),
            any_probability(),
            any_probability(),
            any_probability()
        )
            .prop_map(|(p, r, bad, good)| LossSpec::GilbertElliott { p, r, bad, good }),
    ]
}

fn any_rate() -> impl Strategy<Value = Limit<Rate>> {
    prop_oneof![
        Just(Limit::Unlimited),
        (1u64..=1_000_000_000_000).prop_map(|b| Limit::At(Rate::from_bps(b))),
    ]
}

fn any_spec() -> impl Strategy<Value = LinkSpec> {
    (
        (
            proptest::option::of(any_rate()),
            proptest::option::of(any::<u32>().prop_map(Overhead)),
            proptest::option::of(any_duration()),
            proptest::option::of(any_duration()),
            proptest::option::of(prop_oneof![
                Just(JitterDist::Uniform),
                Just(JitterDist::Normal)
            ]),
            proptest::option::of(any_loss()),
        ),
        (
            proptest::option::of(any_probability()),
            proptest::option::of(any_probability()),
            proptest::option::of(any_duration()),
            proptest::option::of(prop_oneof![
                Just(Limit::Unlimited),
                any::<u32>().prop_map(Limit::At)
            ]),
            proptest::option::of(prop_oneof![
                Just(Limit::Unlimited),
                (0u64..1 << 50).prop_map(|b| Limit::At(ByteSize::new(b)))
            ]),
            proptest::option::of(any::<u32>()),
        ),
    )
        .prop_map(
            |(
                (rate, overhead, delay, jitter, jitter_dist, loss),
                (duplicate, reorder, reorder_gap, queue, queue_bytes, mtu),
            )| LinkSpec {
                rate,
                overhead,
                delay,
                jitter,
                jitter_dist,
                loss,
                duplicate,
                reorder,
                reorder_gap,
                queue,
                queue_bytes,
                mtu,
            },
        )
}

/// Valid parameters: every field in range.
fn any_params() -> impl Strategy<Value = Params> {
    (
        any_spec(),
        68u32..=65535,
        proptest::option::of(1u32..),
        proptest::option::of(1u64..1 << 50),
    )
        .prop_map(|(s, mtu, packets, bytes)| {
            let s = LinkSpec {
                mtu: Some(mtu),
                queue: Some(Limit::from_option(packets)),
                queue_bytes: Some(Limit::from_option(bytes.map(ByteSize::new))),
                ..s
            };
            Params::try_from(&s).unwrap()
        })
}

proptest! {
    #[test]
    fn text_round_trips(s in any_spec()) {
        let text = s.to_string();
        prop_assert_eq!(text.parse::<LinkSpec>(), Ok(s), "text: {}", text);
    }

    #[test]
    fn json_round_trips(s in any_spec()) {
        let json = serde_json::to_string(&s).unwrap();
        prop_assert_eq!(serde_json::from_str::<LinkSpec>(&json).unwrap(), s, "json: {}", json);
    }

    #[test]
    fn params_round_trip_through_the_full_spec(p in any_params()) {
        let s = LinkSpec::from(&p);
        prop_assert_eq!(Params::try_from(&s), Ok(p.clone()));
        // ... and through its text form, as `headway ctl` shows it.
        prop_assert_eq!(Params::try_from(&s.to_string().parse::<LinkSpec>().unwrap()), Ok(p));
    }

    #[test]
    fn changes_name_only_what_differs_and_apply_back(b in any_params(), t in any_params()) {
        let c = LinkSpec::changes(&b, &t);
        prop_assert_eq!(c.apply(&b), Ok(t.clone()));
        prop_assert!(LinkSpec::changes(&t, &t).is_empty());
        // A key is named exactly when the full specs disagree on it.
        let (fb, ft) = (LinkSpec::from(&b), LinkSpec::from(&t));
        prop_assert_eq!(c.delay.is_some(), fb.delay != ft.delay);
        prop_assert_eq!(c.loss.is_some(), fb.loss != ft.loss);
        prop_assert_eq!(c.mtu.is_some(), fb.mtu != ft.mtu);
    }

    #[test]
    fn parsing_arbitrary_text_never_panics(text in ".{0,80}") {
        let _ = text.parse::<LinkSpec>();
    }

    #[test]
    fn parsing_near_miss_text_never_panics(
        pieces in proptest::collection::vec(
            (
                prop_oneof![
                    proptest::sample::select(KEYS.to_vec()).prop_map(String::from),
                    proptest::sample::select(GE_KEYS.to_vec()).prop_map(String::from),
                    "[a-z_]{0,6}",
                ],
                prop_oneof![Just("=".to_string()), Just(String::new()), Just("==".to_string())],
                prop_oneof![
                    Just("ge:".to_string()),
                    Just("none".to_string()),
                    "[0-9.]{0,5}(%|ms|mbit|KiB|)",
                    ".{0,8}",
                ],
                prop_oneof![Just(" "), Just(","), Just("")],
            ),
            0..8,
        )
    ) {
        let text: String = pieces.iter().map(|(k, eq, v, sep)| format!("{k}{eq}{v}{sep}")).collect();
        if let Ok(s) = text.parse::<LinkSpec>() {
            // Whatever parses must print back to something that parses to the same spec.
            prop_assert_eq!(s.to_string().parse::<LinkSpec>(), Ok(s));
        }
    }
}
