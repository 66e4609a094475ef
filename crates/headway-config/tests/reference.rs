//! `docs/config.md`, the config file reference, is made from the schema's own doc comments
//! (`src/file.rs`, `src/file/adc.rs`, `tcp.rs`, `cache.rs`): every section and every field, with its meaning, unit
//! and default. This test renders it and fails when the committed file differs, so the
//! reference can never fall behind the schema. Regenerate it with
//! `HEADWAY_WRITE_DOCS=1 cargo test -p headway-config --test reference`.

use std::fmt::Write as _;

const SOURCES: [&str; 4] = [
    include_str!("../src/file.rs"),
    include_str!("../src/file/adc.rs"),
    include_str!("../src/file/tcp.rs"),
    include_str!("../src/file/cache.rs"),
];
const DOC: &str = "../../docs/config.md";

/// One `pub struct` of the schema: its doc and its fields' docs.
struct Section {
    name: String,
    doc: Vec<String>,
    fields: Vec<(String, String)>,
}

/// The doc-comment lines directly above `line_no` (exclusive), skipping attributes.
fn doc_above(lines: &[&str], line_no: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = line_no;
    while i > 0 {
        i -= 1;
        let l = lines[i].trim();
        if l.starts_with("#[") {
            continue;
        }
        match l.strip_prefix("///") {
            Some(d) => out.push(d.trim().to_string()),
            None => break,
        }
    }
    out.reverse();
    out
}

fn sections() -> Vec<Section> {
    let mut out = Vec::new();
    for src in SOURCES {
        let lines: Vec<&str> = src.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if let Some(rest) = lines[i].trim().strip_prefix("pub struct ") {
                if let Some(name) = rest.strip_suffix(" {") {
                    let mut s = Section {
                        name: name.to_string(),
                        doc: doc_above(&lines, i),
                        fields: Vec::new(),
                    };
                    i += 1;
                    while i < lines.len() && lines[i] != "}" {
                        let t = lines[i].trim();
                        if let Some(f) = t.strip_prefix("pub ") {
                            if let Some((field, _)) = f.split_once(':') {
                                let doc = doc_above(&lines, i).join(" ");
                                s.fields.push((field.to_string(), doc));
                            }
                        }
                        i += 1;
                    }
                    out.push(s);
                }
            }
            i += 1;
        }
    }
    out
}

fn render() -> String {
    let mut md = String::from(
        "# Headway config file reference\n\n\
         Made from the schema's doc comments by `crates/headway-config/tests/reference.rs`; do not \
         edit by hand. Durations are written as text (`\"300ms\"`, `\"5s\"`, `\"2m\"`), sizes with \
         units (`\"64KiB\"`, `\"4GiB\"`), rates with units (`\"1.5mbit\"`). Link specs (the values \
         of `both`, `a_to_b`, `b_to_a`) are documented in the README's \"Link specs\" table. \
         `headway check -c FILE` validates a file; a mistake exits 64 with `file:line:column`, \
         what is wrong and what to write instead.\n\n\
         Examples: `crates/headway-config/examples/headway.toml` (links, admin), \
         `wanopt-branch.toml` and `wanopt-dc.toml` (a WAN-optimizer pair), \
         `adc-sharepoint.toml` (the ADC doing what seed 000's NetScaler configuration does), \
         `adc-api-gateway.toml` (an API front end: access list, rate limits per client and per \
         key, a canary, tenants hashed to servers, admin pages behind a password).\n",
    );
    for s in sections() {
        let title = s
            .doc
            .first()
            .and_then(|d| d.strip_prefix('`'))
            .and_then(|d| d.split_once('`'))
            .map(|(t, _)| t.to_string());
        let heading = title.unwrap_or_else(|| {
            if s.name == "ConfigFile" {
                "The file".to_string()
            } else {
                s.name.clone()
            }
        });
        let _ = write!(md, "\n## {heading}\n\n");
        let _ = writeln!(md, "{}\n", s.doc.join(" ").replace("  ", " ").trim());
        md.push_str("| key | meaning, unit and default |\n|---|---|\n");
        for (f, d) in &s.fields {
            let _ = writeln!(md, "| `{f}` | {} |", d.replace('|', "\\|"));
        }
    }
    md
}

#[test]
fn every_section_and_field_is_documented_and_the_reference_is_current() {
    let secs = sections();
    assert!(
        secs.len() >= 18,
        "the schema parser found {} sections",
        secs.len()
    );
    for s in &secs {
        assert!(!s.doc.is_empty(), "section {} has no doc", s.name);
        for (f, d) in &s.fields {
            assert!(!d.is_empty(), "{}.{f} has no doc", s.name);
        }
    }
    let md = render();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
    if std::env::var_os("HEADWAY_WRITE_DOCS").is_some() {
        std::fs::write(&path, &md).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == md,
        "docs/config.md is not what the schema says: run \
         `HEADWAY_WRITE_DOCS=1 cargo test -p headway-config --test reference` and commit it"
    );
}

/// The guides' TOML examples are configs Headway takes as they are written.
#[test]
fn the_guides_examples_parse() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    for guide in ["grpc.md", "tcp-profiles.md"] {
        let text = std::fs::read_to_string(docs.join(guide)).unwrap();
        let mut blocks = text.split("```toml\n").skip(1).peekable();
        assert!(blocks.peek().is_some(), "{guide} has no TOML example");
        for block in blocks {
            let toml = block.split("```").next().unwrap();
            if let Err(e) = headway_config::Config::parse(toml, guide) {
                panic!("{guide}: {e}\n{toml}");
            }
        }
    }
}
