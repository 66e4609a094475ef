//! Basic authentication on a rule, end to end: a users file of real bcrypt hashes, browsers'
//! challenge, wrong and right passwords, the rule's other paths untouched, and a reload that
//! reads the file again.

use super::*;

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_asks_for_a_user_and_password_before_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("admin.htpasswd");
    let hash = |p: &str| bcrypt::hash(p, 4).unwrap();
    std::fs::write(
        &users,
        format!(
            "# admins\nalice:{}\nbob:{}\n",
            hash("wonder"),
            hash("builder")
        ),
    )
    .unwrap();
    let (_o, text) = one_origin("").await;
    let text = format!(
        "{text}[[virtual_server.rule]]\nname = \"admin\"\npath_prefix = \"/echo\"\ngroup = \"g\"\n\
         auth = {{ realm = \"admin area\", users_file = \"admin.htpasswd\" }}\n"
    );
    let cfg_path = dir.path().join("adc.toml");
    let parse = |t: &str| {
        Config::parse(t, &cfg_path.display().to_string())
            .unwrap_or_else(|e| panic!("{e}"))
            .adc
    };
    let p = Proxy::start_with(parse(&text), 7, 2).await.unwrap();
    let addr = p.bound_addrs()[0].1;
    let c = client();
    let ask = |auth: Option<String>| {
        let c = c.clone();
        async move {
            let h: Vec<(&str, &str)> = match &auth {
                Some(a) => vec![("authorization", a.as_str())],
                None => Vec::new(),
            };
            send(&c, "GET", addr, "/echo", &h, b"").await.unwrap()
        }
    };
    // No credentials: the browser's challenge, and no server asked.
    let a = ask(None).await;
    assert_eq!(a.status, 401);
    assert_eq!(
        a.headers["www-authenticate"],
        "Basic realm=\"admin area\", charset=\"UTF-8\""
    );
    assert_eq!(ask(Some(basic("alice", "builder"))).await.status, 401);
    assert_eq!(ask(Some(basic("carol", "wonder"))).await.status, 401);
    assert_eq!(ask(Some("Bearer abc".into())).await.status, 401);
    // A user: the request goes on, its Authorization field with it.
    let a = ask(Some(basic("alice", "wonder"))).await;
    assert_eq!(a.status, 200);
    let echoed: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(
        echoed["headers"]["authorization"][0],
        basic("alice", "wonder")
    );
    assert_eq!(ask(Some(basic("bob", "builder"))).await.status, 200);
    // What the rule does not match needs no credentials.
    assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    let s = p.snapshot();
    assert_eq!(s.virtual_servers[0].rule_unauthorized, [4]);
    assert_eq!(s.groups[0].servers[0].requests, 3);
    // A reload reads the file again: bob is gone, alice's password changed.
    std::fs::write(&users, format!("alice:{}\n", hash("looking-glass"))).unwrap();
    p.replace(parse(&text)).await.unwrap();
    assert_eq!(ask(Some(basic("bob", "builder"))).await.status, 401);
    assert_eq!(ask(Some(basic("alice", "wonder"))).await.status, 401);
    assert_eq!(ask(Some(basic("alice", "looking-glass"))).await.status, 200);
    assert_eq!(p.snapshot().virtual_servers[0].rule_unauthorized, [6]);
    p.shutdown(Duration::from_secs(1)).await;
}
