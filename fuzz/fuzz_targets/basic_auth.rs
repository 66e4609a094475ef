//! Basic authentication reads a client's `Authorization` field and an operator's users file:
//! any bytes as either must never panic; credentials read back are what a client would have
//! encoded (the name holds no `:`, and encoding them again reads the same), and a users file
//! that parses lists each name once, each with a bcrypt hash.
#![no_main]

use base64::Engine as _;
use headway_config::adc::auth::{is_bcrypt, parse_users};
use headway_proxy::http::auth::credentials;
use http::{header::AUTHORIZATION, HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(data) {
        headers.insert(AUTHORIZATION, v);
        if let Some((user, password)) = credentials(&headers) {
            assert!(!user.contains(':'));
            let again = base64::engine::general_purpose::STANDARD
                .encode(format!("{user}:{password}"));
            headers.insert(AUTHORIZATION, format!("Basic {again}").parse().unwrap());
            assert_eq!(credentials(&headers), Some((user, password)));
        }
    }
    if let Ok(users) = parse_users(&String::from_utf8_lossy(data)) {
        assert!(!users.is_empty());
        for (i, (name, hash)) in users.iter().enumerate() {
            assert!(is_bcrypt(hash));
            assert!(users[..i].iter().all(|(n, _)| n != name));
        }
    }
});
