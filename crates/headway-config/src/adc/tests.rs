use super::*;
use crate::Config;

fn parse(text: &str) -> Config {
    match Config::parse(text, "adc.toml") {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// Asserts the error is at `line:col` and its message contains each of `parts`.
fn assert_err(text: &str, line: usize, col: usize, parts: &[&str]) {
    let e = match Config::parse(text, "adc.toml") {
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

#[test]
fn the_sharepoint_example_parses_as_the_seed_configures_it() {
    let text = include_str!("../../examples/adc-sharepoint.toml");
    let c = Config::parse(text, "examples/adc-sharepoint.toml").unwrap();
    assert_eq!(c.runtime.workers, Some(2));
    let adc = &c.adc;
    assert_eq!(adc.monitors.len(), 2);
    assert_eq!(adc.monitors[0].kind, MonitorKind::Tcp(TcpCheck::default()));
    assert_eq!((adc.monitors[0].rise, adc.monitors[0].fall), (2, 3));
    let g80 = adc.group("sharepoint_80").unwrap();
    assert_eq!(g80.method, Method::LeastConnection);
    assert_eq!(g80.monitor.as_deref(), Some("tcp"));
    assert_eq!(g80.response_timeout, Duration::from_secs(360));
    assert_eq!(g80.servers.len(), 2);
    assert_eq!(g80.servers[0].name, "spsdog4-25");
    match &g80.persistence {
        Some(Persistence::Cookie(c)) => {
            assert_eq!(c.name, "NSC_SP80");
            assert_eq!(c.max_age, None);
            assert!(c.http_only);
        }
        other => panic!("{other:?}"),
    }
    let vs = &adc.virtual_servers[0];
    assert_eq!(vs.kind, VirtualServerKind::Http);
    assert_eq!(vs.action, Action::Group("sharepoint_80".into()));
    assert_eq!(vs.client_idle_timeout, Duration::from_secs(180));
    assert_eq!(vs.rules.len(), 1);
    assert_eq!(vs.rules[0].action.group(), Some("sharepoint_8080"));
    assert_eq!(
        vs.rules[0].conditions,
        vec![Condition::PathContains("/_layouts/MySite.aspx".into())]
    );
    assert_eq!(
        vs.access_log,
        Some(AccessLog {
            path: None,
            format: AccessLogFormat::Combined
        })
    );
}

#[test]
fn defaults_of_a_minimal_http_virtual_server() {
    let c = parse(&format!("{GROUP}{VS}"));
    let g = &c.adc.groups[0];
    assert_eq!(g.method, Method::RoundRobin);
    assert_eq!((g.surge_queue, g.retries, g.pool_max_idle), (1024, 2, 1024));
    assert_eq!(g.servers[0].name, "127.0.0.1:8080");
    assert_eq!(g.servers[0].weight, 1);
    assert_eq!(g.servers[0].state, AdminState::Enabled);
    let v = &c.adc.virtual_servers[0];
    assert!(v.http2 && v.x_forwarded_for && v.x_forwarded_proto && !v.forwarded);
    assert!(v.upgrades && !v.accept_proxy_protocol);
    assert_eq!(
        (g.send_proxy_protocol, g.slow_start),
        (None, Duration::ZERO)
    );
    assert_eq!(
        g.passive,
        headway_lb::health::Passive {
            max_fails: 3,
            fail_timeout: Duration::from_secs(10)
        }
    );
    assert_eq!(v.tunnel_idle_timeout, Duration::from_secs(3600));
    assert_eq!((v.max_header_bytes, v.max_headers), (32 * 1024, 100));
    assert!(v.rules.is_empty() && v.access_log.is_none());
    assert_eq!(c.runtime, RuntimeConfig::default());
}

#[test]
fn a_monitor_port_is_a_tcp_port() {
    let m = |port: &str| format!("[[monitor]]\nname = \"m\"\nkind = \"tcp\"\nport = {port}\n");
    assert_eq!(parse(&m("8081")).adc.monitors[0].port, Some(8081));
    assert_eq!(
        parse(&m("1").replace("port = 1\n", "")).adc.monitors[0].port,
        None
    );
    for bad in ["0", "65536"] {
        assert_err(&m(bad), 4, 8, &["port", "is out of range: use 1 to 65535"]);
    }
}

#[test]
fn max_body_bytes_is_a_positive_size_for_http_only() {
    let c = parse(&format!("{GROUP}{VS}max_body_bytes = \"10MiB\"\n"));
    assert_eq!(c.adc.virtual_servers[0].max_body_bytes, Some(10 << 20));
    assert_eq!(
        parse(&format!("{GROUP}{VS}")).adc.virtual_servers[0].max_body_bytes,
        None
    );
    assert_err(
        &format!("{GROUP}{VS}max_body_bytes = \"0B\"\n"),
        10,
        18,
        &["max_body_bytes must be larger than 0"],
    );
    let tcp = VS.replace("kind = \"http\"", "kind = \"tcp\"");
    assert_err(
        &format!("{GROUP}{tcp}max_body_bytes = \"1MiB\"\n"),
        10,
        18,
        &["`max_body_bytes` is for HTTP virtual servers"],
    );
}

#[test]
fn proxy_protocol_is_taken_from_clients_and_sent_to_servers() {
    let text = format!(
        "{}{}",
        GROUP.replace(
            "name = \"web\"\n",
            "name = \"web\"\nsend_proxy_protocol = \"v2\"\n"
        ),
        VS.replace(
            "kind = \"http\"",
            "kind = \"tcp\"\naccept_proxy_protocol = true"
        )
    );
    let c = parse(&text);
    assert_eq!(c.adc.groups[0].send_proxy_protocol, Some(ProxyProtocol::V2));
    assert!(c.adc.virtual_servers[0].accept_proxy_protocol);
    assert!(c.adc.virtual_servers[0].proxy_protocol_from.is_empty());
    let from = |list: &str, accept: bool| {
        format!(
            "{GROUP}{VS}{}proxy_protocol_from = {list}\n",
            if accept {
                "accept_proxy_protocol = true\n"
            } else {
                ""
            }
        )
    };
    let c = parse(&from("[\"10.0.0.0/8\", \"2001:db8::1\"]", true));
    let nets = &c.adc.virtual_servers[0].proxy_protocol_from;
    assert!(nets[0].contains("10.1.2.3".parse().unwrap()));
    assert!(nets[0].contains("::ffff:10.1.2.3".parse().unwrap()));
    assert!(!nets[0].contains("11.0.0.1".parse().unwrap()));
    assert!(nets[1].contains("2001:db8::1".parse().unwrap()));
    assert!(!nets[1].contains("2001:db8::2".parse().unwrap()));
    assert_err(
        &from("[\"10.0.0.0/8\"]", false),
        10,
        23,
        &["add `accept_proxy_protocol = true`"],
    );
    assert_err(
        &from("[\"10.0.0.1/8\"]", true),
        11,
        24,
        &["proxy_protocol_from:", "`10.0.0.0/8`"],
    );
    let text = GROUP.replace(
        "name = \"web\"\n",
        "name = \"web\"\nsend_proxy_protocol = \"2\"\n",
    );
    assert_err(
        &text,
        3,
        23,
        &[
            "unknown send_proxy_protocol `2`",
            "use \"v1\" (text) or \"v2\"",
        ],
    );
}

#[test]
fn rules_compile_every_condition() {
    let text = format!(
        "{GROUP}[[server_group]]\nname = \"img\"\n[[server_group.server]]\naddress = \"127.0.0.1:9000\"\n{VS}\
         [[virtual_server.rule]]\nname = \"images\"\ngroup = \"img\"\nhost = \"*.Example.com\"\n\
         path_extension = [\".JPG\", \"gif\"]\nmethod = [\"GET\", \"HEAD\"]\n\
         header = {{ name = \"X-Beta\", regex = \"^1\" }}\n\
         [[virtual_server.rule]]\ngroup = \"img\"\npath_regex = \"^/static/[0-9]+\"\npath_prefix = \"/s\"\n"
    );
    let c = parse(&text);
    let rules = &c.adc.virtual_servers[0].rules;
    assert_eq!(rules[0].name, "images");
    assert_eq!(rules[1].name, "rule-2");
    assert_eq!(
        rules[0].conditions[0],
        Condition::HostSuffix(".example.com".into())
    );
    assert_eq!(
        rules[0].conditions[1],
        Condition::PathExtension(vec!["jpg".into(), "gif".into()])
    );
    match &rules[0].conditions[3] {
        Condition::Header {
            name,
            value: ValueMatch::Regex(p),
        } => {
            assert_eq!(name, "x-beta");
            assert!(p.0.is_match("12"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rules[1].conditions[0], Condition::PathPrefix("/s".into()));
    match &rules[1].conditions[1] {
        Condition::PathRegex(p) => assert!(p.0.is_match("/static/12/x")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_group_points_at_the_reference_and_suggests() {
    let text = format!(
        "{GROUP}{}",
        VS.replace("group = \"web\"", "group = \"webs\"")
    );
    assert_err(
        &text,
        9,
        9,
        &["unknown server group `webs`", "did you mean `web`"],
    );
}

#[test]
fn unknown_monitor_and_method_are_reported_with_suggestions() {
    let text = GROUP.replace("name = \"web\"\n", "name = \"web\"\nmonitor = \"tpc\"\n");
    assert_err(&text, 3, 11, &["unknown monitor `tpc`", "no [[monitor]]"]);
    let text = format!(
        "[[monitor]]\nname = \"tcp\"\nkind = \"tcp\"\n{}",
        GROUP.replace("name = \"web\"\n", "name = \"web\"\nmonitor = \"tcpx\"\n")
    );
    assert_err(&text, 6, 11, &["did you mean `tcp`"]);
    let text = GROUP.replace(
        "name = \"web\"\n",
        "name = \"web\"\nmethod = \"least-connections\"\n",
    );
    assert_err(
        &text,
        3,
        10,
        &["unknown method", "did you mean `least-connection`"],
    );
}

#[test]
fn a_group_without_servers_is_refused() {
    assert_err(
        "[[server_group]]\nname = \"web\"\n",
        2,
        8,
        &["has no servers", "[[server_group.server]]"],
    );
}

#[test]
fn duplicate_listen_addresses_and_names_are_refused() {
    let text = format!("{GROUP}{VS}{}", VS.replace("front", "back"));
    assert_err(
        &text,
        13,
        10,
        &["127.0.0.1:8000 is already used", "`front`"],
    );
    let text = format!("{GROUP}{VS}{}", VS.replace("8000", "8001"));
    assert_err(&text, 11, 8, &["virtual server name `front` is used twice"]);
    let text = format!("{GROUP}[[server_group.server]]\naddress = \"127.0.0.1:8080\"\n");
    assert_err(&text, 6, 11, &["appears twice"]);
}

#[test]
fn tcp_virtual_servers_refuse_http_options_and_cookie_persistence() {
    let tcp = VS.replace("\"http\"", "\"tcp\"");
    assert_err(
        &format!("{GROUP}{tcp}max_headers = 10\n"),
        10,
        15,
        &["is `tcp`", "max_headers"],
    );
    assert_err(
        &format!("{GROUP}{tcp}tunnel_idle_timeout = \"10m\"\n"),
        10,
        23,
        &["is `tcp`", "tunnel_idle_timeout"],
    );
    assert_err(
        &format!("{GROUP}{tcp}upgrades = false\n"),
        7,
        8,
        &["is `tcp`", "`upgrades`"],
    );
    assert_err(
        &format!("{GROUP}{tcp}[[virtual_server.rule]]\ngroup = \"web\"\npath = \"/\"\n"),
        11,
        9,
        &["content-switching rules need HTTP"],
    );
    let cookie = GROUP.replace(
        "[[server_group.server]]",
        "[server_group.persistence]\nkind = \"cookie\"\n[[server_group.server]]",
    );
    assert_err(
        &format!("{cookie}{tcp}"),
        11,
        9,
        &["cookie persistence, which needs HTTP"],
    );
    // Source-IP persistence behind tcp is fine.
    let ip = GROUP.replace(
        "[[server_group.server]]",
        "[server_group.persistence]\nkind = \"source-ip\"\nmask = 24\n[[server_group.server]]",
    );
    let c = parse(&format!("{ip}{tcp}"));
    assert_eq!(
        c.adc.groups[0].persistence,
        Some(Persistence::SourceIp(SourceIpPersistence {
            mask_v4: 24,
            mask_v6: 64,
            timeout: Duration::from_secs(120),
            capacity: 1_000_000
        }))
    );
}

#[test]
fn monitor_checks() {
    assert_err(
        "[[monitor]]\nname = \"m\"\nkind = \"tcp\"\npath = \"/\"\n",
        4,
        8,
        &["`path` is for HTTP monitors"],
    );
    assert_err(
        "[[monitor]]\nname = \"m\"\nkind = \"http\"\ninterval = \"1s\"\ntimeout = \"2s\"\n",
        5,
        11,
        &["longer than interval"],
    );
    assert_err(
        "[[monitor]]\nname = \"m\"\nkind = \"http\"\nexpect_status = \"600-700\"\n",
        4,
        17,
        &["expect_status"],
    );
    assert_err(
        "[[monitor]]\nname = \"m\"\nkind = \"htp\"\n",
        3,
        8,
        &["did you mean `http`"],
    );
    let c = parse("[[monitor]]\nname = \"m\"\nkind = \"http\"\ninterval = \"1s\"\n");
    assert_eq!(c.adc.monitors[0].timeout, Duration::from_secs(1));
}

#[test]
fn header_rules_refuse_framing_headers_and_bad_names() {
    assert_err(
        &format!("{GROUP}{VS}[virtual_server.request_headers]\nremove = [\"Transfer-Encoding\"]\n"),
        10,
        1,
        &["managed by the proxy"],
    );
    assert_err(
        &format!("{GROUP}{VS}[virtual_server.response_headers]\nset = {{ \"X Bad\" = \"1\" }}\n"),
        11,
        19,
        &["not a header name"],
    );
    let c = parse(&format!(
        "{GROUP}{VS}[virtual_server.response_headers]\nremove = [\"Server\"]\nadd = {{ \"X-Env\" = \"lab\" }}\n"
    ));
    let h = &c.adc.virtual_servers[0].response_headers;
    assert_eq!(h.remove, vec!["server".to_string()]);
    assert_eq!(h.add[0].0, "x-env");
    assert_eq!(h.add[0].1.as_text().as_deref(), Some("lab"));
}

#[test]
fn header_values_may_hold_what_is_known_of_the_request() {
    let c = parse(&format!(
        "{GROUP}{VS}request_id = \"X-Request-ID\"\n[virtual_server.request_headers]\n\
         set = {{ \"X-Real-IP\" = \"{{client_ip}}\", \"X-Trace\" = \"{{request_id}}@{{virtual_server}}\" }}\n"
    ));
    let h = &c.adc.virtual_servers[0].request_headers;
    assert_eq!(h.set[0].0, "x-real-ip");
    assert_eq!(h.set[0].1 .0, [ValuePart::ClientIp]);
    assert_eq!(h.set[1].1.to_string(), "{request_id}@{virtual_server}");
    assert_err(
        &format!(
            "{GROUP}{VS}[virtual_server.request_headers]\nset = {{ \"X-Id\" = \"{{request_id}}\" }}\n"
        ),
        11,
        18,
        &["uses {request_id}, and the virtual server makes none"],
    );
    assert_err(
        &format!(
            "{GROUP}{VS}[virtual_server.request_headers]\nadd = {{ \"X-Ip\" = \"{{remote_addr}}\" }}\n"
        ),
        11,
        18,
        &["the value of header `X-Ip`: unknown placeholder `{remote_addr}`"],
    );
}

#[test]
fn bad_regex_and_empty_rule_are_reported() {
    assert_err(
        &format!("{GROUP}{VS}[[virtual_server.rule]]\ngroup = \"web\"\npath_regex = \"(\"\n"),
        12,
        14,
        &["not a valid regular expression"],
    );
    assert_err(
        &format!("{GROUP}{VS}[[virtual_server.rule]]\ngroup = \"web\"\n"),
        11,
        9,
        &["has no condition"],
    );
}

#[test]
fn cookie_same_site_none_needs_secure() {
    let g = GROUP.replace(
        "[[server_group.server]]",
        "[server_group.persistence]\nkind = \"cookie\"\nsame_site = \"none\"\n[[server_group.server]]",
    );
    assert_err(&g, 5, 13, &["needs secure = true"]);
}

#[test]
fn numbers_out_of_range_name_the_range() {
    let text = GROUP.replace("address", "weight = 5000\naddress");
    assert_err(
        &text,
        4,
        10,
        &["weight 5000 is out of range: use 0 to 1000"],
    );
    assert_err("[runtime]\nworkers = 0\n", 2, 11, &["use 1 to 256"]);
}

#[test]
fn servers_may_be_given_by_dns_name_with_the_groups_lookup_settings() {
    let text = format!(
        "{VS}[[server_group]]\nname = \"web\"\ndns_refresh = \"5s\"\ndns_prefer = \"ipv6\"\n\
         [[server_group.server]]\naddress = \"App1.Internal:8080\"\n\
         [[server_group.server]]\naddress = \"10.0.0.5:80\"\n"
    );
    let c = parse(&text);
    let g = c.adc.group("web").unwrap();
    assert_eq!(g.dns_refresh, Duration::from_secs(5));
    assert_eq!(g.dns_prefer, DnsPrefer::Ipv6);
    assert_eq!(
        g.servers[0].address,
        ServerAddress::Name {
            host: "app1.internal".into(),
            port: 8080
        }
    );
    // The default name is the address as it is used.
    assert_eq!(g.servers[0].name, "app1.internal:8080");
    assert_eq!(
        g.servers[1].address,
        ServerAddress::Ip("10.0.0.5:80".parse().unwrap())
    );
    let defaults = parse(&format!("{VS}{GROUP}"));
    let g = defaults.adc.group("web").unwrap();
    assert_eq!(
        (g.dns_refresh, g.dns_prefer),
        (Duration::from_secs(30), DnsPrefer::Ipv4)
    );
}

#[test]
fn a_bad_server_address_or_dns_setting_is_refused_where_it_is() {
    let bad = |address: &str| {
        format!(
            "{VS}[[server_group]]\nname = \"web\"\n[[server_group.server]]\n\
             address = \"{address}\"\n"
        )
    };
    assert_err(
        &bad("app1.internal"),
        9,
        11,
        &[
            "group `web`: server address `app1.internal` has no port",
            "app1.internal:8080",
        ],
    );
    assert_err(&bad("http://app1:80"), 9, 11, &["is a URL"]);
    assert_err(&bad("10.0.0.300:80"), 9, 11, &["not a valid IPv4 address"]);
    assert_err(
        &format!(
            "{VS}[[server_group]]\nname = \"web\"\ndns_prefer = \"both\"\n\
             [[server_group.server]]\naddress = \"127.0.0.1:8080\"\n"
        ),
        8,
        14,
        &["unknown dns_prefer `both`", "\"ipv4\" or \"ipv6\""],
    );
}

#[test]
fn rules_may_match_the_clients_network() {
    let text = format!(
        "{GROUP}{VS}[[virtual_server.rule]]\nname = \"admin\"\npath_prefix = \"/admin\"\n\
         source_not = [\"10.0.0.0/8\", \"2001:db8::/32\"]\nrespond = {{ status = 403 }}\n\
         [[virtual_server.rule]]\nname = \"office\"\nsource = [\"192.0.2.10\"]\ngroup = \"web\"\n"
    );
    let c = parse(&text);
    let rules = &c.adc.virtual_servers[0].rules;
    assert_eq!(
        rules[0].conditions[1],
        Condition::SourceNot(vec![
            "10.0.0.0/8".parse().unwrap(),
            "2001:db8::/32".parse().unwrap()
        ])
    );
    assert_eq!(
        rules[1].conditions,
        [Condition::Source(vec!["192.0.2.10/32".parse().unwrap()])]
    );
    let rule =
        |field: &str| format!("{GROUP}{VS}[[virtual_server.rule]]\n{field}\ngroup = \"web\"\n");
    assert_err(
        &rule("source = [\"10.0.0.300/8\"]"),
        11,
        11,
        &["rule `rule-1`: source: `10.0.0.300/8` is not an address or network"],
    );
    assert_err(
        &rule("source_not = []"),
        11,
        14,
        &["source_not needs at least one network"],
    );
}

#[test]
fn error_pages_are_read_and_checked_when_the_config_loads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("down.html"), "<h1>down</h1>").unwrap();
    std::fs::write(dir.path().join("big.html"), vec![b'x'; 64 * 1024 + 1]).unwrap();
    let config = dir.path().join("adc.toml");
    let page = |body: &str| format!("{GROUP}{VS}[[virtual_server.error_page]]\n{body}\n");
    let parse_at = |text: &str| Config::parse(text, &config.display().to_string());
    // Relative to the config file.
    let c = parse_at(&page("status = [502, 503]\nfile = \"down.html\"")).unwrap();
    let p = &c.adc.virtual_servers[0].error_pages;
    assert_eq!(
        p,
        &[ErrorPage {
            statuses: vec![502, 503],
            body: "<h1>down</h1>".into(),
            content_type: "text/html; charset=utf-8".into(),
        }]
    );
    assert_eq!(
        ErrorPage::find(p, 503).map(|p| p.body.as_str()),
        Some("<h1>down</h1>")
    );
    assert!(ErrorPage::find(p, 504).is_none());
    let refused = |body: &str, says: &str| {
        let e = parse_at(&page(body)).unwrap_err().to_string();
        assert!(e.contains(says), "{body}: {e}");
        assert!(e.contains("adc.toml:1"), "{body}: the line is given: {e}");
    };
    refused(
        "status = [302]\nfile = \"down.html\"",
        "status 302 is out of range: use 400–599",
    );
    refused(
        "status = [503, 503]\nfile = \"down.html\"",
        "status 503 is given twice",
    );
    refused("status = []\nfile = \"down.html\"", "needs statuses");
    refused(
        "status = [503]\nfile = \"missing.html\"",
        "cannot use an error page",
    );
    refused(
        "status = [503]\nfile = \"big.html\"",
        "larger than 65536 bytes",
    );
    refused(
        "status = [503]\nfile = \"down.html\"\ncontent_type = \"html\"",
        "not a media type",
    );
    let twice = format!(
        "{}[[virtual_server.error_page]]\nstatus = [504, 503]\nfile = \"down.html\"\n",
        page("status = [503]\nfile = \"down.html\"")
    );
    let e = parse_at(&twice).unwrap_err().to_string();
    assert!(e.contains("status 503 has two error pages"), "{e}");
    // Not on tcp.
    let tcp = page("status = [503]\nfile = \"down.html\"").replace("\"http\"", "\"tcp\"");
    let e = parse_at(&tcp).unwrap_err().to_string();
    assert!(e.contains("error pages are HTTP answers"), "{e}");
}

#[test]
fn request_ids_name_a_header_of_their_own() {
    let c = parse(&format!("{GROUP}{VS}request_id = \"X-Request-ID\"\n"));
    assert_eq!(
        c.adc.virtual_servers[0].request_id.as_deref(),
        Some("x-request-id")
    );
    assert_eq!(
        parse(&format!("{GROUP}{VS}")).adc.virtual_servers[0].request_id,
        None
    );
    for bad in ["Host", "X-Forwarded-For", "bad name"] {
        assert_err(
            &format!("{GROUP}{VS}request_id = \"{bad}\"\n"),
            10,
            14,
            &[&format!("request_id `{bad}` cannot carry request IDs")],
        );
    }
}

#[test]
fn retry_on_names_error_statuses() {
    let with = |list: &str| {
        format!(
            "{VS}[[server_group]]\nname = \"web\"\nretry_on = {list}\n\
             [[server_group.server]]\naddress = \"127.0.0.1:8080\"\n"
        )
    };
    let c = parse(&with("[502, 503, 504]"));
    assert_eq!(c.adc.group("web").unwrap().retry_on, [502, 503, 504]);
    assert!(parse(&format!("{VS}{GROUP}"))
        .adc
        .group("web")
        .unwrap()
        .retry_on
        .is_empty());
    assert_err(
        &with("[200]"),
        8,
        13,
        &["group `web`: retry_on: status 200 is out of range"],
    );
    assert_err(&with("[]"), 8, 12, &["retry_on needs statuses"]);
}

#[test]
fn tcp_monitors_may_send_and_expect() {
    let m = |kind: &str, extra: &str| {
        format!("{GROUP}{VS}[[monitor]]\nname = \"m\"\nkind = \"{kind}\"\n{extra}\n")
    };
    let c = parse(&m("tcp", "send = \"PING\\r\\n\"\nexpect = \"+PONG\""));
    assert_eq!(
        c.adc.monitors[0].kind,
        MonitorKind::Tcp(TcpCheck {
            send: Some("PING\r\n".into()),
            expect: Some("+PONG".into()),
        })
    );
    assert_err(
        &m("http", "send = \"x\""),
        13,
        8,
        &["`send` is for TCP monitors"],
    );
    assert_err(
        &m("tcp", "expect = \"\""),
        13,
        10,
        &["`expect` must be 1 to 4096 bytes"],
    );
}

#[test]
fn a_share_of_the_clients_is_steady_per_client_and_near_its_size() {
    for (text, bp) in [
        ("10%", 1000),
        ("0.5%", 50),
        (" 100 % ", 10_000),
        ("0.01%", 1),
    ] {
        assert_eq!(share::parse_share(text), Ok(bp), "{text}");
    }
    for bad in ["10", "0%", "101%", "1.234%", "-5%", "%", "x%", "1e2%"] {
        assert!(share::parse_share(bad).is_err(), "{bad}");
    }
    let canary = Share::new(1000, "canary");
    let clients: Vec<std::net::IpAddr> = (0..20_000u32)
        .map(|i| std::net::Ipv4Addr::from(0x0a00_0000 + i).into())
        .collect();
    let inside = clients.iter().filter(|c| canary.holds(**c)).count();
    // 10 % of 20,000 = 2,000; a fair hash stays within a few per cent of it.
    assert!((1_800..=2_200).contains(&inside), "{inside}");
    // Steady: the same answer for a client every time, as IPv4 or IPv4-mapped IPv6.
    for c in &clients[..100] {
        let std::net::IpAddr::V4(v4) = c else {
            unreachable!()
        };
        assert_eq!(canary.holds(*c), canary.holds(v4.to_ipv6_mapped().into()));
    }
    // Another rule splits the clients independently of this one.
    let other = Share::new(1000, "other");
    let both = clients
        .iter()
        .filter(|c| canary.holds(**c) && other.holds(**c))
        .count();
    assert!(
        (100..=320).contains(&both),
        "{both} in both of two 10 % shares"
    );
    assert!(clients.iter().all(|c| Share::new(10_000, "x").holds(*c)));
    let c = parse(&format!(
        "{GROUP}{VS}[[virtual_server.rule]]\nname = \"canary\"\nshare = \"10%\"\ngroup = \"web\"\n"
    ));
    assert_eq!(
        c.adc.virtual_servers[0].rules[0].conditions,
        [Condition::Share(canary)]
    );
    assert_err(
        &format!("{GROUP}{VS}[[virtual_server.rule]]\nshare = \"110%\"\ngroup = \"web\"\n"),
        11,
        9,
        &["rule `rule-1`: share `110%` is not a percentage"],
    );
}

#[test]
fn a_rule_may_rewrite_the_path_it_sends_to_its_group() {
    let rule = |extra: &str| {
        format!(
            "{GROUP}{VS}[[virtual_server.rule]]\npath_prefix = \"/api\"\n{extra}\n\
             path_rewrite = {{ from = \"^/api(/.*)?$\", to = \"$1\" }}\n"
        )
    };
    let c = parse(&rule("group = \"web\""));
    let rw = c.adc.virtual_servers[0].rules[0]
        .path_rewrite
        .as_ref()
        .unwrap();
    assert_eq!(rw.apply("/api/users").as_deref(), Some("/users"));
    assert_eq!(rw.apply("/api").as_deref(), Some("/"));
    assert_eq!(rw.apply("/other"), None);
    let e = Config::parse(&rule("respond = { status = 403 }"), "adc.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("path_rewrite changes what is sent to a group"),
        "{e}"
    );
    for (from, to, says) in [
        ("(", "/", "`from` is not a valid regular expression"),
        (
            "^/a",
            "/b?c",
            "`to` must be visible ASCII without spaces, `?` or `#`",
        ),
        ("^/a", "/b c", "`to` must be visible ASCII"),
    ] {
        let text = format!(
            "{GROUP}{VS}[[virtual_server.rule]]\npath_prefix = \"/a\"\ngroup = \"web\"\n\
             path_rewrite = {{ from = \"{from}\", to = \"{to}\" }}\n"
        );
        let e = Config::parse(&text, "adc.toml").unwrap_err().to_string();
        assert!(e.contains(says), "{from} {to}: {e}");
    }
}

#[test]
fn a_rule_may_limit_how_fast_its_requests_are_taken() {
    use rate_limit::{RateKey, RateLimit};
    let rule = |limit: &str| {
        format!(
            "{GROUP}{VS}[[virtual_server.rule]]\npath = \"/login\"\ngroup = \"web\"\n\
             rate_limit = {limit}\n"
        )
    };
    let limit = |text: &str| {
        parse(&rule(text)).adc.virtual_servers[0].rules[0]
            .rate_limit
            .clone()
            .unwrap()
    };
    assert_eq!(
        limit("{ requests = 5 }"),
        RateLimit {
            requests: 5,
            per: Duration::from_secs(1),
            by: RateKey::Client
        }
    );
    assert_eq!(
        limit("{ requests = 100, per = \"1m\", by = \"all\" }"),
        RateLimit {
            requests: 100,
            per: Duration::from_secs(60),
            by: RateKey::All
        }
    );
    let keyed = limit("{ requests = 10, per = \"1h\", by = \"header\", header = \"X-API-Key\" }");
    assert_eq!(keyed.by, RateKey::Header("x-api-key".into()));
    assert!((keyed.per_second() - 10.0 / 3600.0).abs() < 1e-12);
    assert_eq!(
        parse(&format!(
            "{GROUP}{VS}[[virtual_server.rule]]\npath = \"/\"\ngroup = \"web\"\n"
        ))
        .adc
        .virtual_servers[0]
            .rules[0]
            .rate_limit,
        None
    );
    // Each refusal points at the value it refuses (`at`), with what to write.
    for (text, at, says) in [
        (
            "{ requests = 0 }",
            "0",
            "requests 0 is out of range: use 1 to 1000000",
        ),
        ("{ requests = 2000000 }", "2", "out of range"),
        (
            "{ requests = 5, per = \"0s\" }",
            "\"0s",
            "per must be from \"1ms\" to \"24h\"",
        ),
        (
            "{ requests = 5, per = \"25h\" }",
            "\"25h",
            "per must be from",
        ),
        (
            "{ requests = 5, by = \"ip\" }",
            "\"ip",
            "by `ip` is not known: use \"client\"",
        ),
        (
            "{ requests = 5, by = \"header\" }",
            "\"h",
            "add `header = \"X-API-Key\"`",
        ),
        (
            "{ requests = 5, header = \"X-Key\" }",
            "\"X",
            "header is only for by = \"header\"",
        ),
        (
            "{ requests = 5, by = \"header\", header = \"X Key\" }",
            "\"X",
            "`X Key` is not a header name",
        ),
        ("{ per = \"1s\" }", "{", "missing field `requests`"),
        (
            "{ requests = 5, burst = 9 }",
            "burst",
            "unknown field `burst`",
        ),
    ] {
        let col = "rate_limit = ".len() + text.find(at).unwrap() + 1;
        assert_err(&rule(text), 13, col, &[says]);
    }
}

#[test]
fn header_and_cookie_hash_name_what_they_hash() {
    let with = |extra: &str| {
        format!(
            "[[server_group]]\nname = \"web\"\n{extra}\n[[server_group.server]]\n\
             address = \"127.0.0.1:8080\"\n{VS}"
        )
    };
    let hash_by = |extra: &str| {
        let g = &parse(&with(extra)).adc.groups[0];
        (g.method, g.hash_by.clone())
    };
    assert_eq!(
        hash_by("method = \"header-hash\"\nhash_header = \"X-Tenant\""),
        (Method::HeaderHash, Some("x-tenant".into()))
    );
    assert_eq!(
        hash_by("method = \"cookie-hash\"\nhash_cookie = \"JSESSIONID\""),
        (Method::CookieHash, Some("JSESSIONID".into()))
    );
    assert_eq!(hash_by("method = \"url-hash\""), (Method::UrlHash, None));
    for (extra, line, col, says) in [
        (
            "method = \"header-hash\"",
            3,
            10,
            "method = \"header-hash\" needs the header to hash: add `hash_header = \"X-Tenant\"`",
        ),
        (
            "method = \"cookie-hash\"\nhash_header = \"X\"",
            4,
            15,
            "hash_header is only for method = \"header-hash\"",
        ),
        (
            "hash_cookie = \"S\"",
            3,
            15,
            "hash_cookie is only for method = \"cookie-hash\"",
        ),
        (
            "method = \"cookie-hash\"\nhash_cookie = \"a b\"",
            4,
            15,
            "`a b` is not a cookie name",
        ),
        (
            "method = \"header-hashing\"",
            3,
            10,
            "did you mean `header-hash`",
        ),
    ] {
        assert_err(&with(extra), line, col, &[says]);
    }
}

#[test]
fn allow_and_deny_name_the_clients_a_virtual_server_serves() {
    let c = parse(&format!(
        "{GROUP}{VS}allow = [\"10.0.0.0/8\", \"2001:db8::/32\"]\ndeny = [\"10.9.0.0/16\"]\n"
    ));
    let v = &c.adc.virtual_servers[0];
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert!(v.admits(ip("10.1.2.3")));
    assert!(v.admits(ip("::ffff:10.1.2.3")));
    assert!(v.admits(ip("2001:db8::7")));
    assert!(!v.admits(ip("10.9.1.1")));
    assert!(!v.admits(ip("192.0.2.1")));
    let open = parse(&format!("{GROUP}{VS}deny = [\"192.0.2.1\"]\n"));
    assert!(open.adc.virtual_servers[0].admits(ip("198.51.100.1")));
    assert!(!open.adc.virtual_servers[0].admits(ip("192.0.2.1")));
    assert_err(
        &format!("{GROUP}{VS}allow = [\"10.0.0.0/33\"]\n"),
        10,
        10,
        &["allow:"],
    );
    assert_err(
        &format!("{GROUP}{VS}deny = []\n"),
        10,
        8,
        &["deny needs at least one network"],
    );
}

#[test]
fn a_rule_may_ask_for_basic_authentication_against_bcrypt_hashes() {
    // Well-formed bcrypt hashes (what they hash is the proxy's business).
    const ALICE: &str = "alice:$2y$05$5uvAtpOUG1xE5sHNAF2ZAu5tWt6gGF9HjX2D0fLJbb9pZ0eIu9G2K";
    const BOB: &str = "bob:$2b$04$abcdefghijklmnopqrstuu0123456789abcdefghijklmnopqrstu";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("adc.toml");
    let write = |text: &str| std::fs::write(dir.path().join("users"), text).unwrap();
    let rule = |auth: &str| {
        format!(
            "{GROUP}{VS}[[virtual_server.rule]]\npath_prefix = \"/admin\"\ngroup = \"web\"\n\
             auth = {auth}\n"
        )
    };
    let parse_at = |text: &str| Config::parse(text, &config.display().to_string());
    write(&format!("# admins\n{ALICE}\n\n{BOB}\r\n"));
    let c = parse_at(&rule("{ realm = \"admin area\", users_file = \"users\" }")).unwrap();
    let a = c.adc.virtual_servers[0].rules[0].auth.clone().unwrap();
    assert_eq!(a.realm, "admin area");
    assert_eq!(
        a.users.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(),
        ["alice", "bob"]
    );
    assert_eq!(a.users[0].1, ALICE.split_once(':').unwrap().1);
    let c = parse_at(&rule("{ users_file = \"users\" }")).unwrap();
    assert_eq!(
        c.adc.virtual_servers[0].rules[0]
            .auth
            .as_ref()
            .unwrap()
            .realm,
        "restricted"
    );
    // Refusals: what is wrong, in which file and line.
    for (file, says) in [
        (
            "alice:$apr1$xyz$abcdefghijklmnopqrstuv\n",
            "line 1: user `alice`: only bcrypt",
        ),
        (
            "alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n",
            "only bcrypt hashes are taken",
        ),
        ("alice:wonder\n", "only bcrypt"),
        (
            &format!("{ALICE}\n{ALICE}\n"),
            "line 2: user `alice` is listed twice",
        ),
        ("# nobody\n\n", "no users"),
        ("just-a-name\n", "line 1 is not `name:hash`"),
    ] {
        write(file);
        let e = parse_at(&rule("{ users_file = \"users\" }"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says) && e.contains("users file"), "{file}: {e}");
    }
    let e = parse_at(&rule("{ users_file = \"missing\" }"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot use a users file"), "{e}");
    write(&format!("{ALICE}\n"));
    let e = parse_at(&rule(
        "{ realm = \"say \\\"hi\\\"\", users_file = \"users\" }",
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("auth realm must be"), "{e}");
    assert!(auth::is_bcrypt(ALICE.split_once(':').unwrap().1));
    assert!(!auth::is_bcrypt(
        "$2y$03$5uvAtpOUG1xE5sHNAF2ZAu5tWt6gGF9HjX2D0fLJbb9pZ0eIu9G2K"
    ));
    assert!(!auth::is_bcrypt(
        "$2y$05$5uvAtpOUG1xE5sHNAF2ZAu5tWt6gGF9HjX2D0fLJbb9pZ0eIu9G2"
    ));
}

proptest::proptest! {
    /// A users file of any text parses or is refused, never panics; what parses prints back
    /// to the same users.
    #[test]
    fn users_files_parse_or_are_refused(text in "(([a-z#]{0,6}:?(\\$2y\\$0[4-9]\\$[./a-zA-Z0-9]{53})?)?\r?\n){0,6}") {
        if let Ok(users) = auth::parse_users(&text) {
            let again: String = users.iter().map(|(u, h)| format!("{u}:{h}\n")).collect();
            proptest::prop_assert_eq!(auth::parse_users(&again).unwrap(), users);
        }
    }

    #[test]
    fn users_files_of_any_bytes_never_panic(text in ".{0,300}") {
        let _ = auth::parse_users(&text);
    }
}

#[test]
fn a_mirror_names_a_group_of_an_http_virtual_server() {
    let c = parse(&format!("{GROUP}{VS}mirror = \"web\"\n"));
    assert_eq!(c.adc.virtual_servers[0].mirror.as_deref(), Some("web"));
    assert_err(
        &format!("{GROUP}{VS}mirror = \"wbe\"\n"),
        10,
        10,
        &["unknown server group `wbe`: the server groups are `web`"],
    );
    let tcp = VS.replace("kind = \"http\"", "kind = \"tcp\"");
    let e = Config::parse(&format!("{GROUP}{tcp}mirror = \"web\"\n"), "adc.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("mirror"), "{e}");
}

#[test]
fn rules_and_cache_policies_may_match_cookies_and_query_parameters() {
    let c = parse(&format!(
        "{GROUP}{VS}[[virtual_server.rule]]\ncookie = {{ name = \"beta\", value = \"1\" }}\n\
         query = {{ name = \"v\", regex = \"^2\" }}\ngroup = \"web\"\n"
    ));
    let conds = &c.adc.virtual_servers[0].rules[0].conditions;
    assert!(
        matches!(&conds[0], Condition::Cookie { name, value: ValueMatch::Exact(v) }
        if name == "beta" && v == "1")
    );
    assert!(
        matches!(&conds[1], Condition::Query { name, value: ValueMatch::Regex(_) }
        if name == "v")
    );
    for (cond, col, says) in [
        (
            "cookie = { name = \"a b\" }",
            19,
            "`a b` is not a cookie name",
        ),
        (
            "query = { name = \"a&b\" }",
            18,
            "`a&b` is not a query parameter name",
        ),
        (
            "query = { name = \"v\", value = \"1\", regex = \"1\" }",
            44,
            "give either `value` or `regex` for the query parameter, not both",
        ),
        (
            "cookie = { name = \"s\", regex = \"(\" }",
            32,
            "not a valid regular expression",
        ),
    ] {
        assert_err(
            &format!("{GROUP}{VS}[[virtual_server.rule]]\n{cond}\ngroup = \"web\"\n"),
            11,
            col,
            &[says],
        );
    }
    let cached = parse(&format!(
        "{GROUP}{VS}[cache]\n[[cache.group]]\nname = \"all\"\n[[cache.policy]]\n\
         name = \"sessions\"\ncookie = {{ name = \"session\" }}\naction = \"bypass\"\n"
    ));
    let p = &cached.adc.cache.as_ref().unwrap().policies[0];
    assert!(
        matches!(&p.conditions[0], Condition::Cookie { name, value: ValueMatch::Any }
        if name == "session")
    );
}

#[test]
fn header_rules_may_rewrite_values() {
    let c = parse(&format!(
        "{GROUP}{VS}[virtual_server.response_headers]\n\
         replace = [{{ name = \"Location\", from = \"^http://app:8080/\", to = \"/api/\" }}]\n"
    ));
    let r = &c.adc.virtual_servers[0].response_headers.replace[0];
    assert_eq!((r.name.as_str(), r.to.as_str()), ("location", "/api/"));
    assert_eq!(r.from.0.as_str(), "^http://app:8080/");
    for (entry, says) in [
        (
            "{ name = \"Loc ation\", from = \"a\", to = \"b\" }",
            "is not a header name",
        ),
        (
            "{ name = \"Location\", from = \"(\", to = \"b\" }",
            "not a valid regular expression",
        ),
        (
            "{ name = \"Location\", from = \"a\", to = \" b\" }",
            "replace `to` must be visible",
        ),
        (
            "{ name = \"Content-Length\", from = \"1\", to = \"2\" }",
            "managed by the proxy",
        ),
        (
            "{ name = \"Location\", from = \"a\" }",
            "missing field `to`",
        ),
    ] {
        let text = format!("{GROUP}{VS}[virtual_server.request_headers]\nreplace = [{entry}]\n");
        let e = Config::parse(&text, "adc.toml").unwrap_err().to_string();
        assert!(e.contains(says), "{entry}: {e}");
    }
}

#[test]
fn a_group_speaks_http1_or_h2_to_its_servers() {
    let with = |line: &str| {
        format!(
            "{}{VS}",
            GROUP.replace("name = \"web\"\n", &format!("name = \"web\"\n{line}\n"))
        )
    };
    assert_eq!(
        parse(&format!("{GROUP}{VS}")).adc.groups[0].protocol,
        UpstreamProtocol::Http1
    );
    assert_eq!(
        parse(&with("protocol = \"http1\"")).adc.groups[0].protocol,
        UpstreamProtocol::Http1
    );
    assert_eq!(
        parse(&with("protocol = \"h2\"")).adc.groups[0].protocol,
        UpstreamProtocol::Http2
    );
    assert_err(
        &with("protocol = \"spdy\""),
        3,
        12,
        &["unknown protocol `spdy`", "use \"http1\"", "\"h2\""],
    );
    assert_err(
        &with("protocol = \"h2\"\nsend_proxy_protocol = \"v1\""),
        4,
        23,
        &[
            "send_proxy_protocol cannot be used with protocol = \"h2\"",
            "remove one",
        ],
    );
}

#[test]
fn grpc_monitors_ask_for_a_service_and_nothing_of_the_other_kinds() {
    let monitor =
        |extra: &str| format!("[[monitor]]\nname = \"m\"\nkind = \"grpc\"\n{extra}\n{GROUP}{VS}");
    let c = parse(&monitor(""));
    assert_eq!(
        c.adc.monitors[0].kind,
        MonitorKind::Grpc {
            service: String::new()
        }
    );
    let c = parse(&monitor("service = \"helloworld.Greeter\""));
    assert_eq!(
        c.adc.monitors[0].kind,
        MonitorKind::Grpc {
            service: "helloworld.Greeter".into()
        }
    );
    assert_err(
        &monitor("path = \"/healthz\""),
        4,
        8,
        &["`path` is not for gRPC monitors"],
    );
    assert_err(
        &monitor("service = \"a b\""),
        4,
        11,
        &["service `a b` must be up to 200 visible characters"],
    );
    let http = "[[monitor]]\nname = \"m\"\nkind = \"http\"\nservice = \"x\"\n";
    assert_err(
        &format!("{http}{GROUP}{VS}"),
        4,
        11,
        &["`service` is for gRPC monitors"],
    );
    let typo = "[[monitor]]\nname = \"m\"\nkind = \"grpcc\"\n";
    assert_err(
        &format!("{typo}{GROUP}{VS}"),
        3,
        8,
        &["did you mean `grpc`?"],
    );
}
