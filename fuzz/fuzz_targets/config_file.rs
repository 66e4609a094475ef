//! Arbitrary UTF-8 through `Config::parse`, the one entry point for config files.
//!
//! Properties:
//! - it never panics, whatever the text (its documented contract);
//! - a rejection says where: the message is not empty, starts with the file name, and its
//!   line and column (when given) lie inside the text — line 1 to (number of lines + 1), column
//!   1 to (characters on that line + 1);
//! - an accepted file holds what `Config` promises: link names and interfaces unique, `a` and
//!   `b` different, and each direction's parameters valid and equal to what their full spec
//!   applies back to.
//!
//! Relative `token_file` paths resolve against the current directory (the file is
//! `fuzz.toml`); none of the seeds sets one.
#![no_main]

use std::collections::HashSet;

use headway_config::{Config, LinkSpec};
use headway_link::Params;
use libfuzzer_sys::fuzz_target;

const PATH: &str = "fuzz.toml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, PATH) {
        Ok(config) => accepted(text, &config),
        Err(e) => rejected(text, &e),
    }
});

fn rejected(text: &str, e: &headway_config::ConfigError) {
    let msg = e.to_string();
    assert!(!msg.is_empty(), "{text:?}: empty error message");
    assert!(
        msg.starts_with(PATH),
        "{text:?}: the message does not start with the file: {msg}"
    );
    let Some(at) = e.location() else {
        return;
    };
    assert_eq!(at.path, PATH, "{text:?}: {msg}");
    let Some(line) = at.line else {
        assert!(
            at.column.is_none(),
            "{text:?}: a column without a line: {msg}"
        );
        return;
    };
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(
        (1..=text.lines().count() + 1).contains(&line),
        "{text:?}: line {line} is outside the text ({} lines): {msg}",
        text.lines().count()
    );
    if let Some(column) = at.column {
        // `split('\n')` has an entry for every line a location can name, including the empty
        // one after a final newline.
        let on_line = lines
            .get(line - 1)
            .unwrap_or_else(|| panic!("{text:?}: line {line} has no text before it: {msg}"))
            .chars()
            .count();
        assert!(
            (1..=on_line + 1).contains(&column),
            "{text:?}: column {column} is outside line {line} ({on_line} characters): {msg}"
        );
    }
}

fn accepted(text: &str, config: &Config) {
    let mut names = HashSet::new();
    let mut ifaces = HashSet::new();
    for l in &config.links {
        assert!(names.insert(&l.name), "{text:?}: link `{}` twice", l.name);
        assert_ne!(
            l.a, l.b,
            "{text:?}: link `{}` joins an interface to itself",
            l.name
        );
        for i in [&l.a, &l.b] {
            assert!(
                !i.is_empty() && i.len() <= 15,
                "{text:?}: interface {i:?} accepted"
            );
            assert!(ifaces.insert(i), "{text:?}: interface `{i}` used twice");
        }
        for p in [&l.a_to_b, &l.b_to_a] {
            assert_eq!(
                p.validate(),
                Ok(()),
                "{text:?}: link `{}` has invalid {p:?}",
                l.name
            );
            let full = LinkSpec::from(p);
            assert_eq!(
                Params::try_from(&full).as_ref(),
                Ok(p),
                "{text:?}: link `{}`: the full spec {full} does not apply back",
                l.name
            );
        }
    }
}
