//! The config file's schema: what serde reads from TOML, before any validation.
//!
//! This module owns the shape of `headway.toml` and nothing else; every value here is
//! as-written. [`crate::Config`]'s `TryFrom<ConfigFile>` turns it into validated runtime types,
//! and that conversion is the only place where values are checked against each other. Fields
//! that a later check may complain about are kept as [`toml::Spanned`] so the error can point at
//! their line and column.
//!
//! ## Sections
//!
//! | section | meaning |
//! |---|---|
//! | `[admin]` | the admin API listener ([`AdminSection`]) |
//! | `[[link]]` | one emulated WAN link between two interfaces ([`LinkSection`]); repeatable |
//!
//! Sections for the other roles (`[[virtual_server]]`, `[wanopt]`, `[overlay]`, …) will be
//! added here as those roles land. Until then any other top-level key or section is an error,
//! so a misspelt or not-yet-supported section never goes unnoticed.
//!
//! ## Example
//!
//! `crates/headway-config/examples/headway.toml` is a complete, commented example.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use crate::config::{ConfigError, Location};
use crate::spec::LinkSpecInput;
use crate::suggest::did_you_mean;

/// The whole config file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The admin API (`[admin]`). Default: listen on `127.0.0.1:9090` without a token.
    #[serde(default)]
    pub admin: AdminSection,
    /// Emulated WAN links (`[[link]]`), in file order. Default: none.
    #[serde(default)]
    pub link: Vec<LinkSection>,
    /// Where the file came from, to turn spans into line and column.
    #[serde(skip)]
    pub(crate) origin: Origin,
}

impl ConfigFile {
    /// Parses TOML `text`; `path` names the file in error messages and is the directory that
    /// relative paths in the file (`token_file`) are resolved against.
    pub fn parse(text: &str, path: &str) -> Result<ConfigFile, ConfigError> {
        let origin = Origin {
            path: path.to_string(),
            text: Arc::from(text),
        };
        let mut file: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            at: origin.locate(e.span()),
            message: with_suggestion(e.message()),
        })?;
        file.origin = origin;
        Ok(file)
    }

    /// The path given to [`ConfigFile::parse`] (`"<config>"` for a file built in code).
    pub fn path(&self) -> &str {
        &self.origin.path
    }
}

/// `[admin]`: where the admin REST API and Prometheus metrics listen.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// Socket address to listen on (`"127.0.0.1:9090"`, `"[::1]:9090"`). An address other than
    /// loopback requires `token` or `token_file`. Default: `"127.0.0.1:9090"`.
    pub listen: Option<Spanned<String>>,
    /// Bearer token every admin request except `/healthz` must present
    /// (`Authorization: Bearer <token>`). Default: none (no authentication).
    pub token: Option<Spanned<String>>,
    /// A file holding the token (surrounding whitespace is ignored), so the token need not be
    /// in the config file; relative to the config file's directory. Not together with `token`.
    /// Default: none.
    pub token_file: Option<Spanned<PathBuf>>,
}

/// `[[link]]`: one emulated WAN link that carries frames between interfaces `a` and `b`.
///
/// The parameters of each direction are `both` applied over the defaults, then that direction's
/// own spec applied over the result. Each spec is a string in the text form
/// (`"rate=1.5mbit delay=150ms"`) or a table of the same keys; see [`crate::spec`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSection {
    /// The link's name in the admin API and metrics: letters, digits, `-`, `_` and `.`, at
    /// most 64 characters, unique in the file. Required.
    pub name: Spanned<String>,
    /// First interface (frames read here leave on `b` through the `a_to_b` direction), in the
    /// network namespace the process runs in. At most 15 characters, no `/`, `:` or
    /// whitespace. Required.
    pub a: Spanned<String>,
    /// Second interface (frames read here leave on `a` through `b_to_a`). Same rules as `a`;
    /// must differ from it. Required.
    pub b: Spanned<String>,
    /// Seed of the link's random sequence (loss, jitter, duplication, reordering); the same
    /// seed gives the same sequence. Default: drawn at start-up and logged.
    pub seed: Option<u64>,
    /// Spec applied to both directions. Default: none (all defaults).
    pub both: Option<Spanned<LinkSpecInput>>,
    /// Spec for the a→b direction, applied over `both`. Default: none.
    pub a_to_b: Option<Spanned<LinkSpecInput>>,
    /// Spec for the b→a direction, applied over `both`. Default: none.
    pub b_to_a: Option<Spanned<LinkSpecInput>>,
    /// Run this link's frame-release threads at this real-time (SCHED_FIFO) priority, 1–99, so
    /// frames leave on time even when the machine is busy (needs root or CAP_SYS_NICE).
    /// Default: normal priority.
    pub realtime: Option<Spanned<u8>>,
}

/// The source of a parsed file: its name for messages and its text for line/column.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) path: String,
    text: Arc<str>,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            path: "<config>".into(),
            text: Arc::from(""),
        }
    }
}

impl Origin {
    /// Where `key = …` or `key=…` first appears inside `span`, if it does: lets a message about
    /// one key of a spec point at that key rather than at the start of the spec.
    pub(crate) fn find_key(&self, span: &std::ops::Range<usize>, key: &str) -> Option<usize> {
        // A table written as a `[header]` has the header as its span; its keys follow until
        // the next header.
        let mut span = span.clone();
        if self.text.get(span.clone())?.starts_with('[') {
            span.end = self.text[span.end..]
                .find("\n[")
                .map_or(self.text.len(), |i| span.end + i);
        }
        let within = self.text.get(span.clone())?;
        let mut from = 0;
        while let Some(i) = within[from..].find(key) {
            let start = from + i;
            let end = start + key.len();
            let before_ok = within[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after_ok = within[end..]
                .trim_start_matches([' ', '\t'])
                .starts_with('=');
            if before_ok && after_ok {
                return Some(span.start + start);
            }
            from = end;
        }
        None
    }

    /// The location of byte offset `span.start`, or just the file if there is no span.
    pub(crate) fn locate(&self, span: Option<std::ops::Range<usize>>) -> Location {
        let Some(span) = span else {
            return Location {
                path: self.path.clone(),
                line: None,
                column: None,
            };
        };
        let start = span.start.min(self.text.len());
        // Spans are byte offsets; a column is counted in characters, both from 1.
        let start = (0..=start)
            .rev()
            .find(|i| self.text.is_char_boundary(*i))
            .unwrap_or(0);
        let before = &self.text[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location {
            path: self.path.clone(),
            line: Some(line),
            column: Some(column),
        }
    }
}

/// Adds "did you mean …?" to serde's `unknown field `x`, expected one of `a`, `b`` messages.
fn with_suggestion(message: &str) -> String {
    let message = message.trim_end();
    let Some(rest) = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))
    else {
        return message.to_string();
    };
    let Some((word, expected)) = rest.split_once('`') else {
        return message.to_string();
    };
    // The candidates are the backquoted words after the unknown one.
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match did_you_mean(word, &candidates) {
        Some(s) => format!("{message} — did you mean `{s}`?"),
        None => message.to_string(),
    }
}
