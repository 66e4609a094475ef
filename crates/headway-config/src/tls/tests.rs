//! The checks of `[[certificate]]` and the `tls` subsections, on certificates made here (rcgen):
//! each mistake is refused with the line of the key that names the file, the file, and a fix.

use std::path::Path;

use super::*;
use crate::adc::VirtualServerKind;
use crate::Config;

/// A test CA and the files it issues, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Test CA");
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        Pki {
            dir,
            ca: rcgen::Issuer::new(params, key),
        }
    }

    /// Issues a certificate for `names` as `{stem}.pem` and `{stem}.key`.
    fn issue(&self, stem: &str, names: &[&str]) -> rcgen::KeyPair {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            names.first().copied().unwrap_or("x"),
        );
        let cert = params.signed_by(&key, &self.ca).unwrap();
        self.write(&format!("{stem}.pem"), &cert.pem());
        self.write(&format!("{stem}.key"), &key.serialize_pem());
        key
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(name), text).unwrap();
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A config file in the directory (relative file names resolve there).
    fn parse(&self, text: &str) -> Result<Config, crate::ConfigError> {
        let path = self.path().join("tls.toml");
        Config::parse(text, &path.display().to_string())
    }
}

const GROUP: &str =
    "[[server_group]]\nname = \"web\"\n[[server_group.server]]\naddress = \"127.0.0.1:8080\"\n";

fn cert(name: &str, stem: &str) -> String {
    format!("[[certificate]]\nname = \"{name}\"\ncert_file = \"{stem}.pem\"\nkey_file = \"{stem}.key\"\n")
}

fn https(tls: &str) -> String {
    format!(
        "[[virtual_server]]\nname = \"front\"\nkind = \"https\"\nlisten = \"127.0.0.1:8443\"\n\
         group = \"web\"\n[virtual_server.tls]\n{tls}\n"
    )
}

/// Asserts the error is at `line` and its message contains each of `parts`.
fn assert_err(r: Result<Config, crate::ConfigError>, line: usize, parts: &[&str]) {
    let e = match r {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    };
    let at = e.location().expect("a located error");
    assert_eq!(at.line, Some(line), "{e}");
    let text = e.to_string();
    assert!(text.contains("tls.toml:"), "{text}");
    for p in parts {
        assert!(text.contains(p), "`{p}` not in: {text}");
    }
}

#[test]
fn certificates_are_read_with_their_names_and_validity() {
    let pki = Pki::new();
    pki.issue("a", &["a.example", "*.a.example"]);
    pki.issue("b", &["b.example"]);
    let text = format!(
        "{}{}{GROUP}{}",
        cert("a", "a"),
        cert("b", "b"),
        https("certificates = [\"a\", \"b\"]\nsession_cache = 0\nmin_version = \"1.3\"")
    );
    let c = pki.parse(&text).unwrap();
    let a = c.adc.certificate("a").unwrap();
    assert_eq!(a.info.dns_names, ["a.example", "*.a.example"]);
    assert_eq!(a.info.subject, "CN=a.example");
    assert_eq!(a.info.issuer, "CN=Test CA");
    assert_eq!(a.info.key_type, "ECDSA P-256");
    assert!(a.info.not_before < a.info.not_after);
    assert_eq!(a.chain.len(), 1);
    assert_eq!(a.cert_file, pki.path().join("a.pem"));
    let vs = &c.adc.virtual_servers[0];
    assert_eq!(vs.kind, VirtualServerKind::Https);
    let tls = vs.tls.as_ref().unwrap();
    assert_eq!(tls.certificates, ["a", "b"]);
    assert_eq!(tls.session_cache, 0);
    assert!(tls.session_tickets);
    assert_eq!(tls.min_version, TlsVersion::Tls13);
    assert_eq!(tls.client_auth, ClientAuth::None);
    // Keys are not printed.
    assert!(!format!("{a:?}").contains("PRIVATE"));
    assert!(format!("{a:?}").contains("PrivateKey(..)"));
}

#[test]
fn a_bad_certificate_file_is_refused_with_its_line_and_name() {
    let pki = Pki::new();
    pki.issue("a", &["a.example"]);
    pki.write("junk.pem", "this is not a certificate\n");
    pki.write(
        "broken.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
    );
    pki.write(
        "garbage.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let with = |file: &str| {
        format!(
            "[[certificate]]\nname = \"a\"\ncert_file = \"{file}\"\nkey_file = \"a.key\"\n{GROUP}"
        )
    };
    assert_err(
        pki.parse(&with("junk.pem")),
        3,
        &[
            "certificate `a`",
            "junk.pem",
            "no PEM certificate",
            "give a PEM file",
        ],
    );
    assert_err(
        pki.parse(&with("broken.pem")),
        3,
        &["broken.pem", "not valid PEM"],
    );
    assert_err(
        pki.parse(&with("garbage.pem")),
        3,
        &["garbage.pem", "not valid X.509"],
    );
    assert_err(
        pki.parse(&with("missing.pem")),
        3,
        &["missing.pem", "No such file"],
    );
}

#[test]
fn a_key_that_is_not_the_certificates_is_refused() {
    let pki = Pki::new();
    pki.issue("a", &["a.example"]);
    pki.issue("b", &["b.example"]);
    let text = format!(
        "[[certificate]]\nname = \"a\"\ncert_file = \"a.pem\"\nkey_file = \"b.key\"\n{GROUP}"
    );
    assert_err(
        pki.parse(&text),
        4,
        &["b.key", "does not belong to the certificate", "a.pem"],
    );
    pki.write(
        "enc.key",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    let text = format!(
        "[[certificate]]\nname = \"a\"\ncert_file = \"a.pem\"\nkey_file = \"enc.key\"\n{GROUP}"
    );
    assert_err(pki.parse(&text), 4, &["enc.key", "encrypted"]);
    let text = format!(
        "[[certificate]]\nname = \"a\"\ncert_file = \"a.pem\"\nkey_file = \"a.pem\"\n{GROUP}"
    );
    assert_err(pki.parse(&text), 4, &["no PEM private key"]);
}

#[test]
fn https_needs_tls_and_only_https_takes_it() {
    let pki = Pki::new();
    pki.issue("a", &["a.example"]);
    let no_tls = format!(
        "{}{GROUP}[[virtual_server]]\nname = \"front\"\nkind = \"https\"\n\
         listen = \"127.0.0.1:8443\"\ngroup = \"web\"\n",
        cert("a", "a")
    );
    assert_err(
        pki.parse(&no_tls),
        11,
        &["`https` but has no [virtual_server.tls]"],
    );
    let on_http = format!(
        "{}{GROUP}{}",
        cert("a", "a"),
        https("certificates = [\"a\"]")
    )
    .replace("kind = \"https\"", "kind = \"http\"");
    assert_err(
        pki.parse(&on_http),
        14,
        &["is `http`", "use kind = \"https\""],
    );
    let typo = format!(
        "{}{GROUP}{}",
        cert("a", "a"),
        https("certificates = [\"a\"]")
    )
    .replace("kind = \"https\"", "kind = \"htps\"");
    assert_err(pki.parse(&typo), 11, &["did you mean `https`?"]);
}

#[test]
fn certificate_lists_are_checked() {
    let pki = Pki::new();
    pki.issue("a", &["a.example"]);
    let head = format!("{}{GROUP}", cert("www", "a"));
    // Unknown name, with a suggestion.
    assert_err(
        pki.parse(&format!("{head}{}", https("certificates = [\"ww\"]"))),
        15,
        &["unknown certificate `ww`", "did you mean `www`?"],
    );
    assert_err(
        pki.parse(&format!("{head}{}", https("certificates = []"))),
        15,
        &["`certificates` is empty"],
    );
    assert_err(
        pki.parse(&format!(
            "{head}{}",
            https("certificates = [\"www\", \"www\"]")
        )),
        15,
        &["listed twice"],
    );
    // A certificate without DNS names can only be the default.
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nameless");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    pki.write("n.pem", &params.self_signed(&key).unwrap().pem());
    pki.write("n.key", &key.serialize_pem());
    let head = format!("{}{}{GROUP}", cert("www", "a"), cert("n", "n"));
    assert_err(
        pki.parse(&format!(
            "{head}{}",
            https("certificates = [\"www\", \"n\"]")
        )),
        19,
        &["certificate `n`", "no DNS names", "list it first"],
    );
    assert!(pki
        .parse(&format!(
            "{head}{}",
            https("certificates = [\"n\", \"www\"]")
        ))
        .is_ok());
}

#[test]
fn versions_before_1_2_and_unknown_modes_are_refused() {
    let pki = Pki::new();
    pki.issue("a", &["a.example"]);
    let head = format!("{}{GROUP}", cert("a", "a"));
    assert_err(
        pki.parse(&format!(
            "{head}{}",
            https("certificates = [\"a\"]\nmin_version = \"1.1\"")
        )),
        16,
        &["never accepted", "\"1.2\" or \"1.3\""],
    );
    assert_err(
        pki.parse(&format!(
            "{head}{}",
            https("certificates = [\"a\"]\nclient_auth = \"requird\"")
        )),
        16,
        &["did you mean `required`?"],
    );
    assert_err(
        pki.parse(&format!(
            "{head}{}",
            https("certificates = [\"a\"]\nclient_auth = \"required\"")
        )),
        16,
        &["needs client_ca_file"],
    );
    assert_err(
        pki.parse(&format!(
            "{head}{}",
            https("certificates = [\"a\"]\nclient_ca_file = \"ca.pem\"")
        )),
        16,
        &["client_ca_file without client certificates"],
    );
    let c = pki
        .parse(&format!(
            "{head}{}",
            https(
                "certificates = [\"a\"]\nclient_auth = \"optional\"\nclient_ca_file = \"ca.pem\""
            )
        ))
        .unwrap();
    match &c.adc.virtual_servers[0].tls.as_ref().unwrap().client_auth {
        ClientAuth::Optional(ca) => assert_eq!(ca.certs.len(), 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn group_tls_reads_its_ca_and_checks_its_name() {
    let pki = Pki::new();
    pki.issue("a", &["a.example"]);
    let group = |tls: &str| {
        format!(
            "{}[[server_group]]\nname = \"web\"\n[[server_group.server]]\n\
             address = \"127.0.0.1:8080\"\n[server_group.tls]\n{tls}\n",
            cert("client", "a")
        )
    };
    let c = pki
        .parse(&group(
            "ca_file = \"ca.pem\"\nserver_name = \"App.Internal\"\ncertificate = \"client\"",
        ))
        .unwrap();
    let t = c.adc.groups[0].tls.as_ref().unwrap();
    assert_eq!(t.server_name.as_deref(), Some("app.internal"));
    assert_eq!(t.certificate.as_deref(), Some("client"));
    assert_eq!(t.ca.certs.len(), 1);
    assert_err(
        pki.parse(&group("ca_file = \"ca.pem\"\nserver_name = \"10.0.0.1\"")),
        11,
        &["not a DNS name"],
    );
    assert_err(
        pki.parse(&group("ca_file = \"a.key\"")),
        10,
        &["group `web`", "a.key", "no PEM certificate"],
    );
    assert_err(
        pki.parse(&group("ca_file = \"ca.pem\"\ncertificate = \"clent\"")),
        11,
        &["did you mean `client`?"],
    );
}
