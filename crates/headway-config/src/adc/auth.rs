//! A rule's HTTP basic authentication (`auth = { realm = "admin", users_file = "admin.htpasswd" }`):
//! the users file is read and checked when the config is loaded (and again on every reload).
//! Only bcrypt hashes are taken; the proxy verifies passwords.

use std::path::PathBuf;

use toml::Spanned;

use crate::config::{invalid, ConfigError};
use crate::file::{AuthSection, Origin};
use crate::wanopt::{file_error, read_limited, resolve};

/// Largest users file.
pub const MAX_USERS_FILE: u64 = 1024 * 1024;

/// A rule's basic authentication: who may pass, and the realm named to browsers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The realm (`WWW-Authenticate: Basic realm="…"`).
    pub realm: String,
    /// The users and their bcrypt hashes, in file order (names unique).
    pub users: Vec<(String, String)>,
    /// The users file, as resolved.
    pub file: PathBuf,
}

/// Checks a rule's `auth` section (`rule` names it in messages) and reads its users file.
pub(crate) fn basic_auth(
    section: &Spanned<AuthSection>,
    rule: &str,
    origin: &Origin,
) -> Result<BasicAuth, ConfigError> {
    let s = section.get_ref();
    let realm = match &s.realm {
        None => "restricted".to_string(),
        Some(r) => {
            let text = r.get_ref();
            let ok = !text.is_empty()
                && text.len() <= 128
                && text
                    .bytes()
                    .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
            if !ok {
                return Err(invalid(
                    origin.locate(Some(r.span())),
                    format!(
                        "rule `{rule}`: auth realm must be 1–128 printable ASCII characters \
                         without `\"` or `\\` (\"admin area\")"
                    ),
                ));
            }
            text.clone()
        }
    };
    let file = resolve(s.users_file.get_ref(), origin);
    let text = read_limited(&file, MAX_USERS_FILE).map_err(|why| {
        file_error(
            &s.users_file,
            "a users file",
            &file,
            &why,
            "give an htpasswd file of bcrypt hashes (`htpasswd -B -c FILE USER`), at most 1 MiB \
             (relative paths start at the config file)",
            origin,
        )
    })?;
    let users = parse_users(&text).map_err(|m| {
        invalid(
            origin.locate(Some(s.users_file.span())),
            format!("rule `{rule}`: users file {}: {m}", file.display()),
        )
    })?;
    Ok(BasicAuth { realm, users, file })
}

/// Parses an htpasswd file of bcrypt hashes: `name:hash` per line, blank lines and lines
/// starting with `#` skipped.
pub fn parse_users(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut users: Vec<(String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let Some((name, hash)) = line.split_once(':') else {
            return Err(format!("line {n} is not `name:hash`"));
        };
        if name.is_empty() || !name.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(format!(
                "line {n}: the user name must be visible ASCII without spaces"
            ));
        }
        if !is_bcrypt(hash) {
            return Err(format!(
                "line {n}: user `{name}`: only bcrypt hashes are taken (`$2y$…`, made by \
                 `htpasswd -B`); MD5 (`$apr1$`), SHA-1 (`{{SHA}}`), crypt and plain passwords \
                 are too weak"
            ));
        }
        if users.iter().any(|(u, _)| u == name) {
            return Err(format!("line {n}: user `{name}` is listed twice"));
        }
        users.push((name.to_string(), hash.to_string()));
    }
    if users.is_empty() {
        return Err("no users: add `name:hash` lines (`htpasswd -B FILE USER`)".into());
    }
    Ok(users)
}

/// Whether `hash` is a bcrypt hash: `$2a$`, `$2b$`, `$2x$` or `$2y$`, a cost of 04–31, then 53
/// characters of bcrypt's base64 (22 of salt, 31 of hash).
pub fn is_bcrypt(hash: &str) -> bool {
    let b = hash.as_bytes();
    b.len() == 60
        && b.starts_with(b"$2")
        && matches!(b[2], b'a' | b'b' | b'x' | b'y')
        && b[3] == b'$'
        && b[6] == b'$'
        && std::str::from_utf8(&b[4..6])
            .ok()
            .and_then(|c| c.parse::<u8>().ok())
            .is_some_and(|c| (4..=31).contains(&c))
        && b[7..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'.' || *c == b'/')
}
