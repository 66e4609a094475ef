use proptest::prelude::*;

use super::*;

/// A table whose entries are written as text.
#[derive(Default)]
struct Table(TableResolver);

impl Table {
    fn set(&self, host: &str, addrs: &[&str]) {
        let ips: Vec<std::net::IpAddr> = addrs.iter().map(|a| a.parse().unwrap()).collect();
        self.0.set(host, &ips);
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn config(servers: &[(&str, &str)]) -> AdcConfig {
    let text = servers
        .iter()
        .map(|(n, a)| format!("[[server_group.server]]\nname = \"{n}\"\naddress = \"{a}\"\n"))
        .collect::<String>();
    let text = format!(
        "[[virtual_server]]\nname = \"v\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\n\
         group = \"g\"\n[[server_group]]\nname = \"g\"\n{text}"
    );
    headway_config::Config::parse(&text, "test.toml")
        .unwrap()
        .adc
}

fn run<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn the_address_in_use_stays_while_the_name_has_it() {
    let (a, b) = (addr("10.0.0.1:80"), addr("10.0.0.2:80"));
    let v6 = addr("[2001:db8::1]:80");
    assert_eq!(choose(Some(b), &[a, b], DnsPrefer::Ipv4), Some(b));
    assert_eq!(choose(Some(b), &[a], DnsPrefer::Ipv4), Some(a));
    assert_eq!(choose(None, &[v6, a, b], DnsPrefer::Ipv4), Some(a));
    assert_eq!(choose(None, &[a, v6], DnsPrefer::Ipv6), Some(v6));
    assert_eq!(choose(None, &[v6], DnsPrefer::Ipv4), Some(v6));
    assert_eq!(choose(None, &[a], DnsPrefer::Ipv6), Some(a));
    assert_eq!(choose(Some(a), &[], DnsPrefer::Ipv4), None);
}

proptest! {
    #[test]
    fn the_choice_is_always_one_of_the_answers(
        found in proptest::collection::vec(any::<SocketAddr>(), 0..6),
        current in proptest::option::of(any::<SocketAddr>()),
        v6 in any::<bool>(),
    ) {
        let prefer = if v6 { DnsPrefer::Ipv6 } else { DnsPrefer::Ipv4 };
        match choose(current, &found, prefer) {
            None => prop_assert!(found.is_empty()),
            Some(c) => {
                prop_assert!(found.contains(&c));
                if let Some(cur) = current.filter(|c| found.contains(c)) {
                    prop_assert_eq!(c, cur);
                } else if found.iter().any(|a| a.is_ipv6() == v6) {
                    prop_assert_eq!(c.is_ipv6(), v6);
                }
            }
        }
    }
}

#[test]
fn a_config_resolves_its_names_and_leaves_ip_addresses_alone() {
    let table = Table::default();
    table.set("app1.internal", &["::1", "10.0.0.1"]);
    table.set("app2.internal", &["10.0.0.2", "10.0.0.3"]);
    let c = config(&[
        ("a", "app1.internal:8080"),
        ("b", "app2.internal:81"),
        ("c", "192.0.2.7:80"),
    ]);
    let r = run(resolve_config(&c, &table.0, &Resolved::new())).unwrap();
    assert_eq!(r.len(), 2);
    let key = |s: &str| ("g".to_string(), s.to_string());
    assert_eq!(r[&key("a")].1, addr("10.0.0.1:8080"));
    assert_eq!(r[&key("b")].1, addr("10.0.0.2:81"));
    assert_eq!(r[&key("a")].0.to_string(), "app1.internal:8080");

    // The name answers in another order: b stays where it is.
    table.set("app2.internal", &["10.0.0.3", "10.0.0.2"]);
    let again = run(resolve_config(&c, &table.0, &r)).unwrap();
    assert_eq!(again, r);
    // A refresh finds nothing moved; then b's address goes away and it has.
    let mut failures = Vec::new();
    assert!(!run(
        refresh(&c.groups[0], &table.0, &r, |s| failures.push(s.to_string()))
    ));
    table.set("app2.internal", &["10.0.0.3"]);
    assert!(run(
        refresh(&c.groups[0], &table.0, &r, |s| failures.push(s.to_string()))
    ));
    assert!(failures.is_empty());
    let moved = run(resolve_config(&c, &table.0, &r)).unwrap();
    assert_eq!(moved[&key("b")].1, addr("10.0.0.3:81"));
}

#[test]
fn a_name_that_fails_keeps_its_last_address_or_refuses_the_config() {
    let table = Table::default();
    table.set("app1.internal", &["10.0.0.1"]);
    let c = config(&[("a", "app1.internal:80")]);
    let r = run(resolve_config(&c, &table.0, &Resolved::new())).unwrap();
    table.0.remove("app1.internal");
    // Applied again (a reload) while the name fails: the last address stays.
    assert_eq!(run(resolve_config(&c, &table.0, &r)).unwrap(), r);
    // A refresh counts the failure and moves nothing.
    let mut failures = Vec::new();
    assert!(!run(
        refresh(&c.groups[0], &table.0, &r, |s| failures.push(s.to_string()))
    ));
    assert_eq!(failures, ["a"]);
    // Another name for the same server has no last address: refused, saying which.
    let other = config(&[("a", "app9.internal:80")]);
    let e = run(resolve_config(&other, &table.0, &r)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "server group g, server a: cannot resolve `app9.internal`: name not known"
    );
    // And a first start with a name that fails is refused.
    assert!(run(resolve_config(&c, &table.0, &Resolved::new())).is_err());
}

#[test]
fn a_lookup_that_finds_nothing_is_a_failure() {
    let table = Table::default();
    table.set("empty.internal", &[]);
    let c = config(&[("a", "empty.internal:80")]);
    let e = run(resolve_config(&c, &table.0, &Resolved::new())).unwrap_err();
    assert!(e.to_string().ends_with("no address"), "{e}");
}

#[test]
fn the_system_resolver_reads_the_hosts_file() {
    let found = run(SystemResolver.lookup("localhost", 8080)).unwrap();
    assert!(!found.is_empty());
    assert!(
        found
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080),
        "{found:?}"
    );
}
