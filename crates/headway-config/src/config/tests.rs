use super::*;
use headway_core::{Probability, Rate};
use headway_link::Loss;
use std::time::Duration;

fn err(text: &str) -> ConfigError {
    match Config::parse(text, "headway.toml") {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    }
}

/// Asserts the error is at `line:col` and its message contains each of `parts`.
fn assert_err(text: &str, line: usize, col: usize, parts: &[&str]) {
    let e = err(text);
    let at = e.location().expect("a located error");
    assert_eq!((at.line, at.column), (Some(line), Some(col)), "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("headway.toml:{line}:{col}: ")),
        "{e}"
    );
    for p in parts {
        assert!(e.to_string().contains(p), "`{p}` not in: {e}");
    }
}

const LINK: &str = "[[link]]\nname = \"wan\"\na = \"wan0\"\nb = \"wan1\"\n";

fn prob(s: &str) -> Probability {
    s.parse().unwrap()
}

#[test]
fn the_example_file_parses() {
    let text = include_str!("../../examples/headway.toml");
    let c = Config::parse(text, "examples/headway.toml").unwrap();
    assert_eq!(c.admin.listen, DEFAULT_ADMIN_LISTEN);
    assert_eq!(c.admin.token.as_deref(), Some("change-me"));
    assert_eq!(c.links.len(), 2);
    let wan = &c.links[0];
    assert_eq!(
        (wan.name.as_str(), wan.a.as_str(), wan.b.as_str()),
        ("wan", "wan0", "wan1")
    );
    assert_eq!(wan.seed, Some(42));
    assert_eq!(wan.a_to_b.rate, Some(Rate::from_bps(1_500_000)));
    assert_eq!(wan.a_to_b.delay, Duration::from_millis(150));
    assert_eq!(wan.a_to_b.overhead, 24);
    assert_eq!(wan.a_to_b.loss, Loss::Bernoulli(Probability::ZERO));
    assert_eq!(wan.b_to_a.delay, Duration::from_millis(150));
    assert_eq!(
        wan.b_to_a.loss,
        Loss::GilbertElliott {
            p: prob("1%"),
            r: prob("30%"),
            loss_good: Probability::ZERO,
            loss_bad: prob("100%")
        }
    );
    assert_eq!(wan.b_to_a.queue.packets, Some(100));
    assert_eq!(wan.b_to_a.queue.bytes, Some(65536));
    assert_eq!(wan.a_to_b.queue.bytes, None);
    let lan = &c.links[1];
    assert_eq!(lan.a_to_b, lan.b_to_a);
    assert_eq!(lan.a_to_b.rate, Some(Rate::from_mbps(100)));
    assert_eq!(lan.seed, None);
}

#[test]
fn an_empty_file_is_the_defaults() {
    let c = Config::parse("", "headway.toml").unwrap();
    assert_eq!(
        c,
        Config {
            admin: AdminConfig::default(),
            links: vec![],
            wanopt: None,
            runtime: RuntimeConfig::default(),
            adc: AdcConfig::default(),
        }
    );
}

#[test]
fn a_link_without_specs_gets_default_params() {
    let c = Config::parse(LINK, "headway.toml").unwrap();
    assert_eq!(c.links[0].a_to_b, Params::default());
    assert_eq!(c.links[0].b_to_a, Params::default());
}

#[test]
fn directions_apply_over_both_in_text_and_table_form() {
    let text = format!(
        "{LINK}both = {{ rate = \"1mbit\", delay = \"10ms\" }}\na_to_b = \"delay=20ms\"\n\
         b_to_a = {{ mtu = 1400 }}\n"
    );
    let c = Config::parse(&text, "headway.toml").unwrap();
    let l = &c.links[0];
    assert_eq!(l.a_to_b.delay, Duration::from_millis(20));
    assert_eq!(l.a_to_b.rate, Some(Rate::from_mbps(1)));
    assert_eq!(l.b_to_a.delay, Duration::from_millis(10));
    assert_eq!(l.b_to_a.mtu, 1400);
}

#[test]
fn unknown_keys_point_at_the_key_and_suggest_the_right_one() {
    // In a [link.a_to_b] table: line 7, column 1.
    assert_err(
        &format!("{LINK}[link.a_to_b]\nrate = \"1mbit\"\ndely = \"5ms\"\n"),
        7,
        1,
        &[
            "unknown field `dely`",
            "expected one of `rate`",
            "did you mean `delay`?",
        ],
    );
    // In an inline table: the key's column.
    assert_err(
        &format!("{LINK}both = {{ rate = \"1mbit\", dely = \"5ms\" }}\n"),
        5,
        26,
        &["unknown field `dely`", "did you mean `delay`?"],
    );
    // In a text spec: the string.
    assert_err(
        &format!("{LINK}both = \"rate=1mbit dly=5ms\"\n"),
        5,
        8,
        &["unknown key `dly` (did you mean `delay`?); known keys: rate,"],
    );
    // In [admin] and [[link]].
    assert_err(
        "[admin]\nlisten = \"127.0.0.1:1\"\ntokn = \"x\"\n",
        3,
        1,
        &["did you mean `token`?"],
    );
    assert_err(
        &format!("{LINK}sed = 1\n"),
        5,
        1,
        &["unknown field `sed`", "did you mean `seed`?"],
    );
}

#[test]
fn unknown_sections_are_rejected() {
    assert_err(
        "[wan_opt]\nenabled = true\n",
        1,
        2,
        &[
            "unknown field `wan_opt`",
            "`admin`, `link`",
            "did you mean `wanopt`?",
        ],
    );
    assert_err(
        "[[virtual_servers]]\nname = \"web\"\n",
        1,
        3,
        &[
            "unknown field `virtual_servers`",
            "did you mean `virtual_server`?",
        ],
    );
}

#[test]
fn bad_values_point_at_the_value() {
    assert_err(
        &format!("{LINK}[link.both]\nrate = \"1.5 mbits\"\n"),
        6,
        8,
        &["`1.5 mbits`", "unknown unit `mbits`", "mbit"],
    );
    assert_err(
        &format!("{LINK}[link.both]\nloss = {{ p = \"1%\", x = \"3\" }}\n"),
        6,
        20,
        &[
            "unknown field `x`",
            "expected one of `p`, `r`, `bad`, `good`",
        ],
    );
    assert_err(
        &format!("{LINK}both = 5\n"),
        5,
        8,
        &["expected a link spec"],
    );
    assert_err(&format!("{LINK}seed = -1\n"), 5, 8, &["-1"]);
    assert_err(
        "[[link]]\nname = \"wan\"\na = \"wan0\"\nb = 5\n",
        4,
        5,
        &["invalid type: integer `5`, expected a string"],
    );
}

#[test]
fn toml_syntax_errors_have_a_position() {
    assert_err("x = [", 1, 6, &["unclosed array"]);
    assert_err(
        "[admin]\nlisten = 127.0.0.1:9090\n",
        2,
        15,
        &["invalid float"],
    );
}

#[test]
fn missing_fields_name_the_field() {
    let e = err("[[link]]\nname = \"wan\"\na = \"wan0\"\n");
    assert!(e.to_string().contains("missing field `b`"), "{e}");
    assert_eq!(e.location().unwrap().line, Some(1));
}

#[test]
fn invalid_params_point_at_the_spec_and_name_the_link() {
    assert_err(
        &format!("{LINK}both = \"rate=1mbit mtu=20\"\n"),
        5,
        20,
        &["link `wan`, both: mtu 20 is out of range: use 68 to 65535 bytes"],
    );
    assert_err(
        &format!("{LINK}both = \"delay=1s\"\n[link.b_to_a]\nqueue = 0\n"),
        7,
        1,
        &["link `wan`, b_to_a: queue limit of zero"],
    );
    // A key that cannot be found (here: the default queue of the base is fine, but the
    // given delay is too large) still points at the spec.
    assert_err(
        &format!("{LINK}a_to_b = {{ \"delay\" = \"61s\" }}\n"),
        5,
        10,
        &["link `wan`, a_to_b: delay 61s is above the maximum of 60 s"],
    );
}

#[test]
fn link_names_must_be_unique_and_safe() {
    let two = format!("{LINK}[[link]]\nname = \"wan\"\na = \"x0\"\nb = \"x1\"\n");
    assert_err(
        &two,
        6,
        8,
        &["link name `wan` is used twice (first on line 2)"],
    );
    assert_err(
        "[[link]]\nname = \"w a n\"\na = \"wan0\"\nb = \"wan1\"\n",
        2,
        8,
        &["`w a n` is not a valid link name"],
    );
    assert_err(
        "[[link]]\nname = \"\"\na = \"wan0\"\nb = \"wan1\"\n",
        2,
        8,
        &["valid link name"],
    );
}

#[test]
fn interfaces_must_be_valid_distinct_and_unshared() {
    assert_err(
        "[[link]]\nname = \"wan\"\na = \"wan0\"\nb = \"wan0\"\n",
        4,
        5,
        &["link `wan`: `a` and `b` are both `wan0`"],
    );
    assert_err(
        "[[link]]\nname = \"wan\"\na = \"a-very-long-interface\"\nb = \"wan0\"\n",
        3,
        5,
        &["not a valid interface name (it is longer than 15 bytes)"],
    );
    for bad in ["eth/0", "eth 0", "eth:0", "", ".."] {
        let text = format!("[[link]]\nname = \"wan\"\na = \"{bad}\"\nb = \"wan0\"\n");
        assert_err(&text, 3, 5, &["not a valid interface name"]);
    }
    let shared = format!("{LINK}[[link]]\nname = \"lan\"\na = \"lan0\"\nb = \"wan1\"\n");
    assert_err(
        &shared,
        8,
        5,
        &["interface `wan1` is already used by link `wan` (line 4)"],
    );
}

#[test]
fn an_exposed_admin_api_needs_a_token() {
    assert_err(
        "[admin]\nlisten = \"0.0.0.0:9090\"\n",
        2,
        10,
        &["reachable from other hosts", "set a token", "127.0.0.1"],
    );
    let c = Config::parse(
        "[admin]\nlisten = \"0.0.0.0:9090\"\ntoken = \" s3cret \"\n",
        "h.toml",
    )
    .unwrap();
    assert_eq!(c.admin.token.as_deref(), Some("s3cret"));
    assert_eq!(c.admin.listen, "0.0.0.0:9090".parse().unwrap());
    let c = Config::parse("[admin]\nlisten = \"[::1]:9091\"\n", "h.toml").unwrap();
    assert_eq!(c.admin.token, None);
    assert_err(
        "[admin]\ntoken = \"  \"\n",
        2,
        9,
        &["the admin token is empty"],
    );
    assert_err(
        "[admin]\nlisten = \"localhost:9090\"\n",
        2,
        10,
        &["`localhost:9090` is not a socket address", "127.0.0.1:9090"],
    );
    assert_err(
        "[admin]\ntoken = \"a\"\ntoken_file = \"t\"\n",
        3,
        14,
        &["either `token` or `token_file`"],
    );
}

#[test]
fn token_files_are_read_relative_to_the_config_file() {
    let dir = std::env::temp_dir().join(format!("headway-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("admin.token"), "t0ken\n").unwrap();
    let cfg = dir.join("headway.toml");
    std::fs::write(
        &cfg,
        "[admin]\nlisten = \"0.0.0.0:9090\"\ntoken_file = \"admin.token\"\n",
    )
    .unwrap();
    let c = Config::from_file(&cfg).unwrap();
    assert_eq!(c.admin.token.as_deref(), Some("t0ken"));

    std::fs::write(&cfg, "[admin]\ntoken_file = \"missing.token\"\n").unwrap();
    let e = Config::from_file(&cfg).unwrap_err().to_string();
    assert!(e.contains(":2:14: cannot read the admin token from"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();

    let e = Config::from_file(dir.join("nope.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    assert!(e.to_string().contains("cannot read the config file"), "{e}");
}

#[test]
fn admin_config_new_checks_the_same_rules() {
    let any = "0.0.0.0:9090".parse().unwrap();
    assert_eq!(
        AdminConfig::new(any, None),
        Err(AdminError::TokenRequired { listen: any })
    );
    assert_eq!(
        AdminConfig::new(DEFAULT_ADMIN_LISTEN, Some(String::new())),
        Err(AdminError::EmptyToken)
    );
    assert!(AdminConfig::new(any, Some("t".into())).is_ok());
    assert!(AdminConfig::new(DEFAULT_ADMIN_LISTEN, None).is_ok());
}

#[test]
fn columns_count_characters_not_bytes() {
    assert_err("[admin] #é\ntokn = 1\n", 2, 1, &["did you mean `token`?"]);
    // toml reports unknown keys in sorted order, so `dely` comes first; it is at character
    // 19 but byte 20.
    assert_err(
        &format!("{LINK}both = {{ \"é\" = 1, dely = \"5ms\" }}\n"),
        5,
        19,
        &["unknown field `dely`"],
    );
}

proptest::proptest! {
    #[test]
    fn parsing_arbitrary_text_never_panics(text in "(?s).{0,200}") {
        let _ = Config::parse(&text, "fuzz.toml");
    }

    #[test]
    fn parsing_mangled_example_never_panics(cut in 0usize..4000, insert in ".{0,4}") {
        let ex = include_str!("../../examples/headway.toml");
        let mut cut = cut.min(ex.len());
        while !ex.is_char_boundary(cut) {
            cut -= 1;
        }
        let text = format!("{}{}{}", &ex[..cut], insert, &ex[cut..]);
        let _ = Config::parse(&text, "fuzz.toml");
    }
}

#[test]
fn an_endless_token_file_is_refused_not_read_forever() {
    let text = "[admin]\nlisten = \"0.0.0.0:9090\"\ntoken_file = \"/dev/zero\"\n";
    let err = Config::parse(text, "t.toml").unwrap_err().to_string();
    assert!(err.contains("larger than 4096 bytes"), "{err}");
    assert!(err.starts_with("t.toml:3:"), "{err}");
}

#[test]
fn realtime_priority_is_read_and_range_checked() {
    let ok = "[[link]]\nname = \"w\"\na = \"a0\"\nb = \"b0\"\nrealtime = 50\n";
    assert_eq!(
        Config::parse(ok, "t.toml").unwrap().links[0].realtime,
        Some(50)
    );
    let none = "[[link]]\nname = \"w\"\na = \"a0\"\nb = \"b0\"\n";
    assert_eq!(
        Config::parse(none, "t.toml").unwrap().links[0].realtime,
        None
    );
    let bad = "[[link]]\nname = \"w\"\na = \"a0\"\nb = \"b0\"\nrealtime = 0\n";
    let err = Config::parse(bad, "t.toml").unwrap_err().to_string();
    assert!(
        err.starts_with("t.toml:5:12:") && err.contains("use 1 to 99"),
        "{err}"
    );
}
