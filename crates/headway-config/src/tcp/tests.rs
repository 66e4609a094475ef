use super::*;
use crate::Config;

/// Seed 003's table (a copy of `scenarios/aol_tcp_profiles.csv`).
const SEED_TABLE: &str = include_str!("../../data/aol_tcp_profiles.csv");

fn parse(text: &str) -> Config {
    match Config::parse(text, "tcp.toml") {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// Asserts the error is at `line:col` and its message contains each of `parts`.
fn assert_err(text: &str, line: usize, col: usize, parts: &[&str]) {
    let e = match Config::parse(text, "tcp.toml") {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    };
    let at = e.location().expect("a located error");
    assert_eq!((at.line, at.column), (Some(line), Some(col)), "{e}");
    for p in parts {
        assert!(e.to_string().contains(p), "`{p}` not in: {e}");
    }
}

const GROUP: &str =
    "[[server_group]]\nname = \"web\"\n[[server_group.server]]\naddress = \"127.0.0.1:8080\"\n";
const VS: &str =
    "[[virtual_server]]\nname = \"front\"\nkind = \"http\"\nlisten = \"127.0.0.1:8000\"\ngroup = \"web\"\n";

/// The seed's rows: `(profile, column → value)`.
fn seed_rows() -> Vec<(String, std::collections::HashMap<String, String>)> {
    let mut lines = SEED_TABLE.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.splitn(header.len(), ',').collect();
            let map = header
                .iter()
                .zip(&cols)
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect::<std::collections::HashMap<_, _>>();
            (cols[0].to_string(), map)
        })
        .collect()
}

#[test]
fn every_row_of_the_seed_table_is_a_preset_with_its_values() {
    let rows = seed_rows();
    assert_eq!(rows.len(), PRESETS.len());
    for (profile, row) in &rows {
        let p = PRESETS
            .iter()
            .find(|p| p.seed_profile == profile)
            .unwrap_or_else(|| panic!("no preset for the seed's {profile}"));
        let on = |k: &str| row[k] == "on";
        let num = |k: &str| row[k].parse::<u64>().unwrap();
        assert_eq!(p.nagle, on("nagle"), "{profile}");
        assert_eq!(p.ws_sack, on("ws"), "{profile}");
        assert_eq!(p.ws_sack, on("sack"), "{profile}");
        assert_eq!(u64::from(p.initial_cwnd), num("initial_cwnd"), "{profile}");
        assert_eq!(p.delayed_ack_ms, num("delayed_ack"), "{profile}");
        assert_eq!(p.min_rto_ms, num("min_rto"), "{profile}");
        // The profile carries them where Linux keeps them.
        let t = p.profile();
        assert_eq!(t.socket.nagle, p.nagle);
        assert_eq!(t.route.initcwnd, Some(p.initial_cwnd));
        assert_eq!(
            t.socket.delayed_ack,
            Some(Duration::from_millis(p.delayed_ack_ms))
        );
        let rto = Duration::from_millis(p.min_rto_ms);
        if rto <= SOCKET_MAX_MIN_RTO {
            assert_eq!((t.socket.min_rto, t.route.rto_min), (Some(rto), None));
        } else {
            assert_eq!((t.socket.min_rto, t.route.rto_min), (None, Some(rto)));
        }
        assert_eq!(t.host.sack, (!p.ws_sack).then_some(false));
    }
}

#[test]
fn preset_names_are_unique_and_valid_profile_names() {
    let names = preset_names();
    for (i, n) in names.iter().enumerate() {
        assert!(check_name(n, "tcp profile").is_ok(), "{n}");
        assert!(!names[..i].contains(n), "{n} twice");
    }
    assert_eq!(
        preset("aol-dialup").unwrap().seed_profile,
        "aol_vip_dialup_client"
    );
    assert!(preset("aol_dialup").is_none());
}

#[test]
fn route_options_render_as_ip_route_words() {
    let r = RouteOptions {
        initcwnd: Some(4),
        initrwnd: Some(20),
        rto_min: Some(Duration::from_millis(500)),
    };
    assert_eq!(
        r.ip_route_args(),
        ["initcwnd", "4", "initrwnd", "20", "rto_min", "500ms"]
    );
    assert!(RouteOptions::default().ip_route_args().is_empty());
    assert!(RouteOptions::default().is_empty());
    let only_rto = RouteOptions {
        rto_min: Some(Duration::from_secs(1)),
        ..RouteOptions::default()
    };
    assert_eq!(only_rto.ip_route_args(), ["rto_min", "1000ms"]);
    assert_eq!(
        preset("aol-dialup")
            .unwrap()
            .profile()
            .route
            .ip_route_args(),
        ["initcwnd", "4", "rto_min", "500ms"]
    );
}

#[test]
fn host_settings_become_sysctls() {
    let h = preset("netscaler-default").unwrap().profile().host;
    assert_eq!(
        h.sysctls(),
        [
            ("net.ipv4.tcp_window_scaling", "0"),
            ("net.ipv4.tcp_sack", "0")
        ]
    );
    assert!(HostSettings::default().sysctls().is_empty());
}

#[test]
fn a_full_profile_section_is_converted_with_units() {
    let text = format!(
        "[[server_group]]\nname = \"web\"\ntcp_profile = \"svc\"\n[[server_group.server]]\n\
         address = \"127.0.0.1:8080\"\n{VS}tcp_profile = \"clients\"\nbacklog = 16384\n\
         [[tcp_profile]]\nname = \"clients\"\npreset = \"aol-mobile\"\nnagle = false\n\
         send_buffer = \"4MiB\"\nreceive_buffer = \"2MiB\"\ncongestion = \"bbr\"\nquickack = true\n\
         delayed_ack = \"40ms\"\nmin_rto = \"150ms\"\nkeepalive_idle = \"60s\"\n\
         keepalive_count = 4\nmss = 1400\nuser_timeout = \"30s\"\nnotsent_lowat = \"128KiB\"\n\
         window_clamp = \"1MiB\"\ninitial_cwnd = 16\ninitial_rwnd = 32\nsack = true\n\
         [[tcp_profile]]\nname = \"svc\"\n"
    );
    let c = parse(&text);
    let v = &c.adc.virtual_servers[0];
    assert_eq!(v.backlog, 16384);
    let p = v.tcp_profile.as_ref().unwrap();
    assert_eq!(p.name, "clients");
    assert_eq!(
        p.socket,
        SocketOptions {
            nagle: false,
            send_buffer: Some(4 << 20),
            receive_buffer: Some(2 << 20),
            congestion: Some("bbr".into()),
            quickack: true,
            delayed_ack: Some(Duration::from_millis(40)),
            // 150 ms fits the socket option; the preset's 1 s route minimum is replaced.
            min_rto: Some(Duration::from_millis(150)),
            keepalive: Some(Keepalive {
                idle: Duration::from_secs(60),
                interval: Duration::from_secs(75),
                count: 4
            }),
            mss: Some(1400),
            user_timeout: Some(Duration::from_secs(30)),
            notsent_lowat: Some(128 << 10),
            window_clamp: Some(1 << 20),
        }
    );
    assert_eq!(
        p.route,
        RouteOptions {
            initcwnd: Some(16),
            initrwnd: Some(32),
            rto_min: None
        }
    );
    assert_eq!(p.host.sack, Some(true));
    let g = c.adc.groups[0].tcp_profile.as_ref().unwrap();
    assert_eq!(g.name, "svc");
    assert_eq!(g.socket, SocketOptions::default());
    assert_eq!(c.adc.tcp_profiles.len(), 2);
}

#[test]
fn presets_are_used_by_name_and_defaults_are_none() {
    let c = parse(&format!("{GROUP}{VS}tcp_profile = \"aol-dialup\"\n"));
    let v = &c.adc.virtual_servers[0];
    assert_eq!(v.tcp_profile, Some(preset("aol-dialup").unwrap().profile()));
    assert_eq!(v.backlog, DEFAULT_BACKLOG);
    assert_eq!(c.adc.groups[0].tcp_profile, None);
    let c = parse(&format!("{GROUP}{VS}"));
    assert_eq!(c.adc.virtual_servers[0].tcp_profile, None);
}

#[test]
fn a_min_rto_above_200ms_moves_to_the_route() {
    let c = parse(&format!(
        "{GROUP}{VS}tcp_profile = \"x\"\n[[tcp_profile]]\nname = \"x\"\nmin_rto = \"400ms\"\n"
    ));
    let p = c.adc.virtual_servers[0].tcp_profile.clone().unwrap();
    assert_eq!(p.socket.min_rto, None);
    assert_eq!(p.route.rto_min, Some(Duration::from_millis(400)));
}

#[test]
fn mistakes_point_at_their_line_and_say_what_to_write() {
    // An unknown profile, with a suggestion.
    assert_err(
        &format!("{GROUP}{VS}tcp_profile = \"aol-dialpu\"\n"),
        10,
        15,
        &[
            "unknown tcp profile `aol-dialpu`",
            "did you mean `aol-dialup`?",
        ],
    );
    // An unknown profile far from any name lists the presets.
    assert_err(
        "[[server_group]]\nname = \"web\"\ntcp_profile = \"zzzzzzzz\"\n\
         [[server_group.server]]\naddress = \"127.0.0.1:8080\"\n",
        3,
        15,
        &["unknown tcp profile", "[[tcp_profile]]", "`aol-vip-std`"],
    );
    // A preset's name cannot be taken.
    assert_err(
        "[[tcp_profile]]\nname = \"aol-mobile\"\n",
        2,
        8,
        &["built-in preset", "preset = \"aol-mobile\""],
    );
    // An unknown preset to start from.
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\npreset = \"aol-mobil\"\n",
        3,
        10,
        &["unknown preset `aol-mobil`", "did you mean `aol-mobile`?"],
    );
    // Twice the same name.
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\n[[tcp_profile]]\nname = \"x\"\n",
        4,
        8,
        &["used twice (first on line 2)"],
    );
    // Ranges, with units.
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\ndelayed_ack = \"300ms\"\n",
        3,
        15,
        &["delayed_ack 300ms is out of range: use 2ms to 200ms"],
    );
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\nsend_buffer = \"1KiB\"\n",
        3,
        15,
        &["send_buffer 1KiB is out of range: use 4KiB to 1GiB"],
    );
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\nmss = 40\n",
        3,
        7,
        &["mss 40 is out of range: use 88 to 32767"],
    );
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\ncongestion = \"BBR v2\"\n",
        3,
        14,
        &["not a congestion control name", "\"cubic\""],
    );
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\nkeepalive_count = 3\n",
        3,
        19,
        &["need keepalive_idle", "keepalive_idle = \"60s\""],
    );
    assert_err(
        &format!("{GROUP}{VS}backlog = 0\n"),
        10,
        11,
        &["backlog 0 is out of range: use 1 to 1000000"],
    );
    // A misspelt key gets serde's list and a suggestion.
    assert_err(
        "[[tcp_profile]]\nname = \"x\"\nmin_rot = \"1s\"\n",
        3,
        1,
        &["unknown field `min_rot`", "did you mean `min_rto`?"],
    );
}
