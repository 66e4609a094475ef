use super::*;
use proptest::prelude::*;

fn basic(text: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let v = base64::engine::general_purpose::STANDARD.encode(text);
    h.insert(
        http::header::AUTHORIZATION,
        format!("Basic {v}").parse().unwrap(),
    );
    h
}

#[test]
fn basic_credentials_are_read_leniently_and_refused_when_broken() {
    assert_eq!(
        credentials(&basic("alice:won:der")),
        Some(("alice".into(), "won:der".into()))
    );
    assert_eq!(
        credentials(&basic(":")),
        Some((String::new(), String::new()))
    );
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        "bAsIc   YWxpY2U6d29uZGVy ".parse().unwrap(),
    );
    assert_eq!(credentials(&h), Some(("alice".into(), "wonder".into())));
    for bad in [
        "Bearer YWxpY2U6d29uZGVy",
        "Basic",
        "Basic !!!",
        "Basic YWxpY2U=",
        "YWxpY2U6d29uZGVy",
    ] {
        h.insert(http::header::AUTHORIZATION, bad.parse().unwrap());
        assert_eq!(credentials(&h), None, "{bad}");
    }
    assert_eq!(credentials(&HeaderMap::new()), None);
}

fn auth_of(users: &[(&str, &str)]) -> Authenticator {
    Authenticator::new(&BasicAuth {
        realm: "admin area".into(),
        users: users
            .iter()
            .map(|(u, p)| (u.to_string(), bcrypt::hash(p, 4).unwrap()))
            .collect(),
        file: "users".into(),
    })
}

#[tokio::test]
async fn users_pass_with_their_password_only_and_passes_are_remembered() {
    let a = auth_of(&[("alice", "wonder"), ("bob", "builder")]);
    assert_eq!(
        a.challenge(),
        "Basic realm=\"admin area\", charset=\"UTF-8\""
    );
    let now = headway_core::SystemClock::now();
    assert!(a.admits(&basic("alice:wonder"), now).await);
    assert!(a.admits(&basic("bob:builder"), now).await);
    assert!(!a.admits(&basic("alice:builder"), now).await);
    assert!(!a.admits(&basic("carol:wonder"), now).await);
    assert!(!a.admits(&HeaderMap::new(), now).await);
    // Two passes remembered (by digest); wrong ones never are.
    assert_eq!(a.remembered.lock().len(), 2);
    assert!(a.admits(&basic("alice:wonder"), now).await);
    assert_eq!(a.remembered.lock().len(), 2);
    // Past the window the check runs again (and passes again).
    assert!(a.admits(&basic("alice:wonder"), now + REMEMBER * 2).await);
    // The dummy hash has the users' cost and matches nothing.
    assert!(bcrypt::verify("", &a.dummy).is_ok_and(|ok| !ok));
}

proptest! {
    /// Any `Authorization` value is read or refused, never a panic; what is read is what was
    /// encoded.
    #[test]
    fn any_authorization_field_is_read_or_refused(
        user in "[^:]{0,20}",
        password in ".{0,40}",
        junk in proptest::collection::vec(0x20u8..0x7f, 0..80),
    ) {
        let text = format!("{user}:{password}");
        prop_assert_eq!(credentials(&basic(&text)), Some((user, password)));
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&junk) {
            h.insert(http::header::AUTHORIZATION, v);
            let _ = credentials(&h);
        }
    }
}
