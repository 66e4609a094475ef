use super::*;
use crate::Config;

/// A directory with a (syntactically) valid certificate, key and dedup key, removed on drop.
struct Files(PathBuf);

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";
const HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const FP: &str = "5b1e0c8f3a4d6e2b9c7f1a0d8e3b5c4a6f2e9d1c7b0a8f3e5d2c4b6a9e1f0d7c";

impl Files {
    fn new(tag: &str) -> Files {
        let dir = std::env::temp_dir().join(format!(
            "headway-config-wanopt-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [
            ("branch.crt", CERT),
            ("branch.key", KEY),
            ("dc.crt", CERT),
            ("dc.key", KEY),
            ("deployment.key", &format!("{HEX}\n")),
        ] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        Files(dir)
    }

    /// Parses `text` as `headway.toml` in this directory.
    fn parse(&self, text: &str) -> Result<Config, ConfigError> {
        let path = self.0.join("headway.toml");
        Config::parse(text, path.to_str().unwrap())
    }

    /// Asserts the error is at `line:col` and its message contains each of `parts`.
    fn assert_err(&self, text: &str, line: usize, col: usize, parts: &[&str]) {
        let e = match self.parse(text) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e,
        };
        let at = e.location().expect("a located error");
        assert_eq!((at.line, at.column), (Some(line), Some(col)), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("headway.toml:{line}:{col}: ")),
            "{e}"
        );
        for p in parts {
            assert!(e.to_string().contains(p), "`{p}` not in: {e}");
        }
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A minimal valid section: lines 1–5 are `[wanopt]`, lines 7–11 one peer `dc`.
const BASE: &str = "[wanopt]
tunnel_listen = \"127.0.0.1:4433\"
cert_file = \"branch.crt\"
key_file = \"branch.key\"
dedup_key_file = \"deployment.key\"

[[wanopt.peer]]
name = \"dc\"
address = \"127.0.0.1:4434\"
fingerprint = \"5b1e0c8f3a4d6e2b9c7f1a0d8e3b5c4a6f2e9d1c7b0a8f3e5d2c4b6a9e1f0d7c\"
link_rate = \"1.5mbit\"
";

/// A service (starting at line 13 after [`BASE`]): `listen` on line 15, `peer` 17, `class` 18.
fn service(id: u32, listen: &str, peer: &str, class: &str) -> String {
    format!(
        "\n[[wanopt.service]]\nid = {id}\nlisten = \"{listen}\"\ntarget = \"127.0.0.1:80\"\n\
         peer = \"{peer}\"\nclass = \"{class}\"\n"
    )
}

#[test]
fn the_example_pair_parses() {
    let f = Files::new("examples");
    for (name, text) in [
        (
            "wanopt-branch.toml",
            include_str!("../../examples/wanopt-branch.toml"),
        ),
        (
            "wanopt-dc.toml",
            include_str!("../../examples/wanopt-dc.toml"),
        ),
    ] {
        let path = f.0.join(name);
        std::fs::write(&path, text).unwrap();
        let c = Config::from_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(c.wanopt.is_some(), "{name}");
    }
    let c = Config::from_file(f.0.join("wanopt-branch.toml")).unwrap();
    let w = c.wanopt.unwrap();
    assert_eq!(w.tunnel_listen, "198.18.0.1:4433".parse().unwrap());
    assert_eq!(w.cert_file, f.0.join("branch.crt"));
    assert_eq!(w.cert_pem, CERT);
    assert_eq!(w.dedup_key.0[1], 0x11);
    assert_eq!(w.memory_store, ByteSize::new(256 << 20));
    assert_eq!(w.retry_after, Duration::from_secs(10));
    assert_eq!(
        w.disk_store,
        Some(DiskStore {
            dir: "/var/lib/headway/store".into(),
            size: ByteSize::new(4 << 30)
        })
    );
    assert_eq!(w.peers.len(), 1);
    assert_eq!(w.peers[0].name, "dc");
    assert_eq!(w.peers[0].link_rate, Rate::from_bps(1_500_000));
    assert_eq!(w.peers[0].rtt, Duration::from_millis(300));
    assert_eq!(w.peers[0].fingerprint, parse_hex32(FP).unwrap());
    assert_eq!(
        w.services,
        vec![Service {
            id: 1,
            listen: "198.18.1.1:8080".parse().unwrap(),
            target: "198.18.2.2:8080".parse().unwrap(),
            peer: "dc".into(),
            class: ServiceClass::DedupDisk,
        }]
    );
    let i = w.intercept.unwrap();
    assert_eq!(i.listen, "0.0.0.0:7070".parse().unwrap());
    assert_eq!(i.interfaces, ["br-c"]);
    assert_eq!(i.rules.len(), 1);
    assert_eq!(i.rules[0].destinations[0].to_string(), "198.18.2.0/24");
    let ports: Vec<String> = i.rules[0].ports.iter().map(ToString::to_string).collect();
    assert_eq!(ports, ["80", "8000-9000", "445"]);

    let dc = Config::from_file(f.0.join("wanopt-dc.toml"))
        .unwrap()
        .wanopt
        .unwrap();
    assert!(dc.services.is_empty() && dc.intercept.is_none());
    assert_eq!(dc.peers[0].fingerprint[0], 0xa3);
}

#[test]
fn defaults_apply_and_any_destination_is_empty() {
    let f = Files::new("defaults");
    let text = format!(
        "{BASE}{}\n[wanopt.intercept]\nlisten = \"127.0.0.1:7070\"\ninterfaces = [\"eth1\"]\n\
         [[wanopt.intercept.rule]]\npeer = \"dc\"\nclass = \"compress\"\n",
        service(0, "127.0.0.1:8080", "dc", "dedup-memory")
    );
    let w = f.parse(&text).unwrap().wanopt.unwrap();
    assert_eq!(w.memory_store, DEFAULT_MEMORY_STORE);
    assert_eq!(w.retry_after, DEFAULT_RETRY_AFTER);
    assert_eq!(w.peers[0].rtt, DEFAULT_RTT);
    assert_eq!(w.peers[0].mtu, DEFAULT_MTU);
    assert_eq!(w.disk_store, None);
    assert!(w.fec, "forward error correction is on by default");
    let without = BASE.replacen("[wanopt]\n", "[wanopt]\nfec = false\n", 1);
    assert!(!f.parse(&without).unwrap().wanopt.unwrap().fec);
    let r = &w.intercept.as_ref().unwrap().rules[0];
    assert!(r.destinations.is_empty() && r.ports.is_empty());
    assert!(w.uses(ServiceClass::Compress) && !w.uses(ServiceClass::DedupDisk));
    // Debug never prints the dedup key.
    assert!(!format!("{w:?}").contains("00112233"));
}

#[test]
fn unknown_peers_suggest_the_right_name() {
    let f = Files::new("peer");
    f.assert_err(
        &format!("{BASE}{}", service(1, "127.0.0.1:8080", "dcc", "compress")),
        17,
        8,
        &["service 1: unknown peer `dcc`: did you mean `dc`?"],
    );
    f.assert_err(
        &format!("{BASE}{}", service(1, "127.0.0.1:8080", "hq", "compress")),
        17,
        8,
        &["unknown peer `hq`: use one of the [[wanopt.peer]] names: `dc`"],
    );
    let rule = "\n[wanopt.intercept]\nlisten = \"127.0.0.1:7070\"\ninterfaces = [\"eth1\"]\n\
                [[wanopt.intercept.rule]]\npeer = \"d\"\nclass = \"compress\"\n";
    f.assert_err(
        &format!("{BASE}{rule}"),
        17,
        8,
        &["intercept rule 1: unknown peer `d`: did you mean `dc`?"],
    );
}

#[test]
fn unknown_classes_and_keys_suggest_the_right_one() {
    let f = Files::new("class");
    f.assert_err(
        &format!("{BASE}{}", service(1, "127.0.0.1:8080", "dc", "dedup-mem")),
        18,
        9,
        &[
            "unknown variant `dedup-mem`",
            "did you mean `dedup-memory`?",
        ],
    );
    f.assert_err(
        &format!("{BASE}rrt = \"300ms\"\n"),
        12,
        1,
        &["unknown field `rrt`", "did you mean `rtt`?"],
    );
    f.assert_err(
        "[wanopt]\ntunnel_listen = \"127.0.0.1:1\"\ncert_file = \"a\"\nkey_file = \"b\"\n",
        1,
        1,
        &["missing field `dedup_key_file`"],
    );
}

#[test]
fn names_ids_and_addresses_must_be_unique() {
    let f = Files::new("unique");
    let second_peer = |name: &str, addr: &str, fp: &str| {
        format!(
            "\n[[wanopt.peer]]\nname = \"{name}\"\naddress = \"{addr}\"\nfingerprint = \"{fp}\"\n\
             link_rate = \"1mbit\"\n"
        )
    };
    f.assert_err(
        &format!("{BASE}{}", second_peer("dc", "127.0.0.1:5000", HEX)),
        14,
        8,
        &["peer name `dc` is used twice (first on line 8)"],
    );
    f.assert_err(
        &format!("{BASE}{}", second_peer("dc2", "127.0.0.1:4434", HEX)),
        15,
        11,
        &["peer address 127.0.0.1:4434 is used twice (first on line 9) (peer `dc`)"],
    );
    f.assert_err(
        &format!("{BASE}{}", second_peer("dc2", "127.0.0.1:5000", FP)),
        16,
        15,
        &["peer fingerprint is used twice"],
    );
    f.assert_err(
        &format!(
            "{BASE}{}{}",
            service(1, "127.0.0.1:8080", "dc", "compress"),
            service(1, "127.0.0.1:8081", "dc", "compress")
        ),
        21,
        6,
        &["service id 1 is used twice (first on line 14): give each service its own id"],
    );
    f.assert_err(
        &format!(
            "{BASE}{}{}",
            service(1, "127.0.0.1:8080", "dc", "compress"),
            service(2, "127.0.0.1:8080", "dc", "compress")
        ),
        22,
        10,
        &["service 2: listen address 127.0.0.1:8080 is already used by service 1 (line 15)"],
    );
    f.assert_err(
        &format!(
            "{BASE}{}\n[wanopt.intercept]\nlisten = \"127.0.0.1:8080\"\ninterfaces = [\"eth1\"]\n\
             [[wanopt.intercept.rule]]\npeer = \"dc\"\nclass = \"compress\"\n",
            service(1, "127.0.0.1:8080", "dc", "compress")
        ),
        21,
        10,
        &["the intercept listener: listen address 127.0.0.1:8080 is already used by service 1"],
    );
}

#[test]
fn bad_cidrs_and_port_ranges_point_at_the_value() {
    let f = Files::new("cidr");
    let rule = |dest: &str, ports: &str| {
        format!(
            "{BASE}\n[wanopt.intercept]\nlisten = \"127.0.0.1:7070\"\ninterfaces = [\"eth1\"]\n\
             [[wanopt.intercept.rule]]\ndestinations = [{dest}]\nports = [{ports}]\n\
             peer = \"dc\"\nclass = \"compress\"\n"
        )
    };
    f.assert_err(
        &rule("\"10.0.0.0/8\", \"198.18.2.0/33\"", ""),
        17,
        31,
        &["intercept rule 1: `198.18.2.0/33` has an invalid prefix length: use 0 to 32"],
    );
    f.assert_err(
        &rule("\"198.18.2.1/24\"", ""),
        17,
        17,
        &["beyond its /24 prefix: write the network `198.18.2.0/24`, or `198.18.2.1/32`"],
    );
    f.assert_err(
        &rule("\"dc.example\"", ""),
        17,
        17,
        &["is not an address or network"],
    );
    f.assert_err(
        &rule("", "\"9000-8000\""),
        18,
        10,
        &["`9000-8000` is not a port range: write the lower port first, `8000-9000`"],
    );
    f.assert_err(
        &rule("", "80, 0"),
        18,
        14,
        &["port 0 is out of range: use 1 to 65535"],
    );
    f.assert_err(&rule("", "70000"), 18, 10, &["port 70000 is out of range"]);
    f.assert_err(
        &rule("", "\"http\""),
        18,
        10,
        &["`http` is not a port or port range"],
    );
    f.assert_err(&rule("", "true"), 18, 10, &["a port (80) or a port range"]);
    let ok = f
        .parse(&rule("\"2001:db8::/32\", \"10.1.2.3\"", "\"443\""))
        .unwrap();
    let r = &ok.wanopt.unwrap().intercept.unwrap().rules[0];
    assert_eq!(r.destinations[1].to_string(), "10.1.2.3/32");
    assert_eq!(
        r.ports,
        [PortRange {
            first: 443,
            last: 443
        }]
    );
}

#[test]
fn dedup_disk_needs_a_disk_store() {
    let f = Files::new("disk");
    f.assert_err(
        &format!("{BASE}{}", service(1, "127.0.0.1:8080", "dc", "dedup-disk")),
        18,
        9,
        &[
            "class `dedup-disk` needs a disk store: add a [wanopt.disk_store] section",
            "or use class `dedup-memory`",
        ],
    );
    let with_store = format!(
        "{BASE}{}\n[wanopt.disk_store]\ndir = \"store\"\nsize = \"64MiB\"\n",
        service(1, "127.0.0.1:8080", "dc", "dedup-disk")
    );
    let w = f.parse(&with_store).unwrap().wanopt.unwrap();
    assert_eq!(w.disk_store.unwrap().dir, f.0.join("store"));
    f.assert_err(
        &with_store.replace("64MiB", "4KiB"),
        22,
        8,
        &["disk_store size 4KiB is too small: give at least 1MiB"],
    );
    f.assert_err(
        &with_store.replace("64MiB", "lots"),
        22,
        8,
        &["`lots` is not a size"],
    );
}

#[test]
fn bad_peer_values_say_what_to_write() {
    let f = Files::new("values");
    f.assert_err(
        &BASE.replace("4434", "x"),
        9,
        11,
        &["address `127.0.0.1:x` is not a UDP socket address"],
    );
    f.assert_err(
        &BASE.replace("7c\"", "7\""),
        10,
        15,
        &[
            "peer `dc`: not a certificate fingerprint: expected 64 hex digits (32 bytes), found 63",
            "headway wanopt fingerprint --cert",
        ],
    );
    f.assert_err(
        &BASE.replace("1.5mbit", "0"),
        11,
        13,
        &["`0` is out of range for a rate"],
    );
    f.assert_err(
        &BASE.replace("1.5mbit", "fast"),
        11,
        13,
        &["`fast` is not a rate"],
    );
    f.assert_err(
        &format!("{BASE}rtt = \"0\"\n"),
        12,
        7,
        &["rtt must be above 0 and at most 60s"],
    );
    f.assert_err(
        &format!("{BASE}mtu = 100\n"),
        12,
        7,
        &["mtu must be between 576 and 9000 bytes"],
    );
    assert_eq!(
        f.parse(&format!("{BASE}mtu = 1400\n"))
            .unwrap()
            .wanopt
            .unwrap()
            .peers[0]
            .mtu,
        1400
    );
    f.assert_err(
        &BASE.replace("\"127.0.0.1:4433\"", "\"localhost:4433\""),
        2,
        17,
        &["tunnel_listen `localhost:4433` is not a UDP socket address"],
    );
    f.assert_err(
        &format!("{BASE}{}", service(1, "8080", "dc", "compress")),
        15,
        10,
        &["service 1: listen `8080` is not a TCP socket address"],
    );
    f.assert_err(
        &BASE.replace("[wanopt]\n", "[wanopt]\nmemory_store = \"0\"\n"),
        2,
        16,
        &["memory_store must be larger than 0"],
    );
    // Colons and a prefix in a fingerprint are fine.
    let colons: Vec<String> = FP
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8(c.to_vec()).unwrap().to_uppercase())
        .collect();
    let w = f
        .parse(&BASE.replace(FP, &format!("sha256:{}", colons.join(":"))))
        .unwrap()
        .wanopt
        .unwrap();
    assert_eq!(w.peers[0].fingerprint, parse_hex32(FP).unwrap());
}

#[test]
fn intercept_needs_interfaces_and_rules() {
    let f = Files::new("intercept");
    let base = format!("{BASE}\n[wanopt.intercept]\nlisten = \"127.0.0.1:7070\"\n");
    f.assert_err(
        &format!("{base}interfaces = []\n[[wanopt.intercept.rule]]\npeer = \"dc\"\nclass = \"compress\"\n"),
        15,
        14,
        &["intercept: list at least one LAN interface"],
    );
    f.assert_err(
        &format!("{base}interfaces = [\"eth1\", \"a/b\"]\n[[wanopt.intercept.rule]]\npeer = \"dc\"\nclass = \"compress\"\n"),
        15,
        23,
        &["intercept: `a/b` is not a valid interface name"],
    );
    f.assert_err(
        &format!("{base}interfaces = [\"eth1\"]\n"),
        13,
        1,
        &[
            "[wanopt.intercept] has no rules",
            "add a [[wanopt.intercept.rule]]",
        ],
    );
}

#[test]
fn missing_or_malformed_files_name_the_file_and_the_fix() {
    let f = Files::new("files");
    let path = |n: &str| f.0.join(n).display().to_string();
    f.assert_err(
        &BASE.replace("\"branch.crt\"", "\"nope.crt\""),
        3,
        13,
        &[
            &format!("cannot use the certificate in `{}`", path("nope.crt")),
            "No such file",
            "headway wanopt identity --cert nope.crt --key branch.key",
        ],
    );
    f.assert_err(
        &BASE.replace("\"branch.crt\"", "\"branch.key\""),
        3,
        13,
        &["it holds no PEM certificate"],
    );
    f.assert_err(
        &BASE.replace("\"branch.key\"", "\"branch.crt\""),
        4,
        12,
        &[
            "cannot use the private key in",
            "it holds no PEM private key",
        ],
    );
    f.assert_err(
        &BASE.replace("\"deployment.key\"", "\"nope.key\""),
        5,
        18,
        &[
            &format!("cannot use the dedup key in `{}`", path("nope.key")),
            "headway wanopt dedup-key --out nope.key",
        ],
    );
    std::fs::write(f.0.join("short.key"), "abcd\n").unwrap();
    f.assert_err(
        &BASE.replace("\"deployment.key\"", "\"short.key\""),
        5,
        18,
        &["it does not hold a dedup key: expected 64 hex digits (32 bytes), found 4"],
    );
    f.assert_err(
        &BASE.replace("\"deployment.key\"", "\"/dev/zero\""),
        5,
        18,
        &["larger than 4096 bytes"],
    );
    // Other mistakes are reported before the files are read.
    f.assert_err(
        &BASE
            .replace("\"branch.crt\"", "\"nope.crt\"")
            .replace("\"1.5mbit\"", "\"1mbit\"\nrtt = \"2m\""),
        12,
        7,
        &["rtt must be above 0 and at most 60s"],
    );
}

#[test]
fn cidr_and_port_text_round_trips() {
    for s in [
        "10.0.0.0/8",
        "0.0.0.0/0",
        "2001:db8::/32",
        "::1/128",
        "192.0.2.7/32",
    ] {
        assert_eq!(s.parse::<Cidr>().unwrap().to_string(), s);
    }
    for s in ["1", "65535", "1-65535", "8000-9000"] {
        assert_eq!(s.parse::<PortRange>().unwrap().to_string(), s);
    }
    assert!("10.0.0.0/".parse::<Cidr>().is_err());
    assert!("-".parse::<PortRange>().is_err());
}

proptest::proptest! {
    #[test]
    fn parsing_a_mangled_wanopt_example_never_panics(cut in 0usize..5000, insert in ".{0,4}") {
        let ex = include_str!("../../examples/wanopt-branch.toml");
        let mut cut = cut.min(ex.len());
        while !ex.is_char_boundary(cut) {
            cut -= 1;
        }
        let text = format!("{}{}{}", &ex[..cut], insert, &ex[cut..]);
        let _ = Config::parse(&text, "fuzz.toml");
    }
}
