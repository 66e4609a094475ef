//! Requests the proxy answers itself: a virtual server or a rule with `redirect` or `respond`,
//! over HTTP/1.1 (own loop and hyper's path), HTTP/2 and a reload into maintenance and back.

use super::*;

/// An `http` virtual server whose default is `action` (no group).
fn answering_vs(action: &str, extra: &str) -> String {
    format!(
        "[[virtual_server]]\nname = \"front\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\n\
         {action}\n{extra}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_80_virtual_server_redirects_every_request_to_https() {
    let text = answering_vs(
        "redirect = { location = \"https://{host}{uri}\", status = 301 }",
        "",
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    let r = send(
        &c,
        "GET",
        addr,
        "/a/b?x=1&y=2",
        &[("host", "WWW.Example.com:80")],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(r.status, 301);
    assert_eq!(r.headers["location"], "https://www.example.com/a/b?x=1&y=2");
    assert!(r.body.is_empty());
    // On one keep-alive connection: a bodiless GET (the own loop), a HEAD, a POST whose body
    // nobody reads (hyper's path) and a GET after it; then a request without a host.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /one HTTP/1.1\r\nHost: a.example\r\n\r\n\
          HEAD /two HTTP/1.1\r\nHost: a.example\r\n\r\n\
          POST /three?q HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\nhello\
          GET /four HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut pending = Vec::new();
    let mut locations = Vec::new();
    for head_only in [false, true, false, false] {
        let (head, body) = one_answer(&mut s, &mut pending, head_only).await;
        assert!(body.is_empty(), "{head}");
        let l = head.lines().find_map(|l| l.strip_prefix("location: "));
        locations.push((head[9..12].to_string(), l.unwrap_or("").to_string()));
    }
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(pending.is_empty() && rest.is_empty(), "{rest:?}");
    let want = [
        "https://a.example/one",
        "https://a.example/two",
        "https://a.example/three?q",
        "https://[2001:db8::1]/four",
    ];
    assert_eq!(locations, want.map(|l| ("301".to_string(), l.to_string())));
    let out = raw(addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.0 400"), "{out}");
    assert!(out.contains("needs the request's Host header"), "{out}");
    let out = raw(
        addr,
        b"GET / HTTP/1.1\r\nHost: evil.example/x?\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    // HTTP/2 with prior knowledge: the host is the :authority.
    let h2: HttpClient = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let r = get(&h2, addr, "/h2?z").await;
    assert_eq!(r.status, 301);
    assert_eq!(r.headers["location"], format!("https://127.0.0.1/h2?z"));
    let s = p.snapshot();
    let v = &s.virtual_servers[0];
    assert_eq!(v.group, "redirect 301 https://{host}{uri}");
    assert_eq!((v.responses[2], v.responses[3]), (6, 2));
    assert!(s.groups.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_answer_beside_rules_that_reach_servers() {
    let (_o, text) = one_origin(
        "[[virtual_server.rule]]\nname = \"moved\"\npath_prefix = \"/old/\"\n\
         redirect = { location = \"/new{query}\", status = 308 }\n\
         [[virtual_server.rule]]\nname = \"admin\"\npath_prefix = \"/admin\"\n\
         respond = { status = 403, body = \"no admin here\\n\" }\n\
         [[virtual_server.rule]]\nname = \"ping\"\npath = \"/ping\"\n\
         respond = { status = 200, body = \"{\\\"ok\\\":true}\", content_type = \"application/json\" }\n",
    )
    .await;
    let (p, addr) = proxy(&text).await;
    let c = client();
    let r = send(&c, "POST", addr, "/old/x?k=v", &[], b"data")
        .await
        .unwrap();
    assert_eq!((r.status, r.origin()), (308, String::new()));
    assert_eq!(r.headers["location"], "/new?k=v");
    let r = get(&c, addr, "/admin/users").await;
    assert_eq!(
        (r.status, r.text(), r.origin()),
        (403, "no admin here\n".into(), String::new())
    );
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
    let r = get(&c, addr, "/ping").await;
    assert_eq!((r.status, r.text()), (200, "{\"ok\":true}".into()));
    assert_eq!(r.headers["content-type"], "application/json");
    // Everything else reaches the server.
    let r = get(&c, addr, "/healthz").await;
    assert_eq!((r.status, r.origin()), (200, "o".into()));
    let s = p.snapshot();
    assert_eq!(
        s.virtual_servers[0].rules,
        [
            ("moved".to_string(), "redirect 308 /new{query}".to_string()),
            ("admin".to_string(), "respond 403".to_string()),
            ("ping".to_string(), "respond 200".to_string()),
        ]
    );
    assert_eq!(s.groups[0].servers[0].requests, 1);
    // Each rule counts the requests it matched; a reload that keeps a rule keeps its count.
    assert_eq!(s.virtual_servers[0].rule_hits, [1, 1, 1]);
    let kept = text.replace("name = \"ping\"", "name = \"health\"");
    p.replace(Config::parse(&kept, "t.toml").unwrap().adc)
        .await
        .expect("reload applies");
    assert_eq!(get(&c, addr, "/ping").await.status, 200);
    assert_eq!(get(&c, addr, "/ping").await.status, 200);
    // `moved` and `admin` kept theirs; the renamed rule started again at 0.
    let v = &p.snapshot().virtual_servers[0];
    assert_eq!(
        (v.rules[2].0.as_str(), &v.rule_hits[..]),
        ("health", &[1, 1, 2][..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_puts_a_site_into_maintenance_and_back() {
    let (_o, serving) = one_origin("").await;
    let (p, addr) = proxy(&serving).await;
    let c = client();
    assert_eq!(get(&c, addr, "/healthz").await.origin(), "o");
    // A keep-alive connection opened before the reload.
    let mut held = TcpStream::connect(addr).await.unwrap();
    held.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    let (a, _) = one_answer(&mut held, &mut pending, false).await;
    assert!(a.starts_with("http/1.1 200"), "{a}");
    let maintenance = serving.replace(
        "group = \"g\"\n\n",
        "respond = { status = 503, body = \"<h1>Back soon</h1>\", content_type = \"text/html\" }\n",
    );
    assert_ne!(maintenance, serving);
    p.replace(Config::parse(&maintenance, "t.toml").unwrap().adc)
        .await
        .expect("maintenance applies");
    let r = get(&c, addr, "/healthz").await;
    assert_eq!((r.status, r.text()), (503, "<h1>Back soon</h1>".into()));
    assert_eq!(r.headers["content-type"], "text/html");
    held.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (a, body) = one_answer(&mut held, &mut pending, false).await;
    assert!(a.starts_with("http/1.1 503"), "{a}");
    assert_eq!(body, b"<h1>Back soon</h1>");
    p.replace(Config::parse(&serving, "t.toml").unwrap().adc)
        .await
        .expect("serving again applies");
    held.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (a, _) = one_answer(&mut held, &mut pending, false).await;
    assert!(a.starts_with("http/1.1 200"), "{a}");
    assert_eq!(get(&c, addr, "/healthz").await.origin(), "o");
}

/// An access list from rules: `/admin` only from inside (`source_not` … `respond 403`), and a
/// partner network sent to its own group (`source`), with clients named by PROXY headers so
/// that they can come from anywhere on one loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_on_the_clients_address_make_an_access_list() {
    let (inside, partner) = (
        Origin::start("inside", Duration::ZERO).await,
        Origin::start("partner", Duration::ZERO).await,
    );
    let text = format!(
        "{}{}{}\
         [[virtual_server.rule]]\nname = \"admin-outside\"\npath_prefix = \"/admin\"\n\
         source_not = [\"10.0.0.0/8\", \"2001:db8::/32\"]\n\
         respond = {{ status = 403, body = \"inside only\" }}\n\
         [[virtual_server.rule]]\nname = \"partner\"\nsource = [\"198.51.100.0/24\"]\n\
         group = \"partner\"\n",
        group("inside", "", &[(inside.addr, "")]),
        group("partner", "", &[(partner.addr, "")]),
        vs("inside", "accept_proxy_protocol = true"),
    );
    let (p, addr) = proxy(&text).await;
    let ask = |client: &str, path: &str| {
        let family = if client.contains(':') { "TCP6" } else { "TCP4" };
        let to = if client.contains(':') {
            "2001:db8::1"
        } else {
            "10.0.0.1"
        };
        format!(
            "PROXY {family} {client} {to} 40000 80\r\nGET {path} HTTP/1.1\r\nHost: x\r\n\
             Connection: close\r\n\r\n"
        )
    };
    let cases = [
        ("203.0.113.9", "/admin/users", "403", "inside only"),
        // Let through: the origin has no /admin and says so.
        ("10.20.30.40", "/admin/users", "404", "X-Origin: inside"),
        ("2001:db8::42", "/admin/", "404", "X-Origin: inside"),
        ("2001:db9::42", "/admin/", "403", "inside only"),
        ("203.0.113.9", "/echo", "200", "X-Origin: inside"),
        ("198.51.100.7", "/echo", "200", "X-Origin: partner"),
        ("198.51.100.7", "/admin", "403", "inside only"),
    ];
    for (client, path, status, says) in cases {
        let answer = raw(addr, ask(client, path).as_bytes()).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{client} {path}: {answer}"
        );
        assert!(
            answer
                .to_ascii_lowercase()
                .contains(&says.to_ascii_lowercase()),
            "{client} {path}: {answer}"
        );
    }
    let s = p.snapshot();
    assert_eq!(s.virtual_servers[0].rule_hits, [3, 1]);
    assert_eq!(s.groups[1].servers[0].requests, 1);
}

/// Error pages: the proxy's own 502/503 answers carry the virtual server's page (its status,
/// `Retry-After` kept); a server's own 503 passes as it came; a reload reads the file again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_own_errors_carry_the_virtual_servers_page() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("down.html");
    std::fs::write(&file, "<h1>We are back soon</h1>\n").unwrap();
    let o = Origin::start("o", Duration::ZERO).await;
    // A port nothing listens on.
    let (dead, _held) = refusing_addr();
    let (closing, _) = closing_server().await;
    let text = format!(
        "{}{}{}{}[[virtual_server.error_page]]\nstatus = [502, 503, 504]\nfile = \"{}\"\n\
         [[virtual_server.rule]]\npath_prefix = \"/gone\"\ngroup = \"dead\"\n\
         [[virtual_server.rule]]\npath_prefix = \"/broken\"\ngroup = \"broken\"\n",
        group("live", "", &[(o.addr, "")]),
        group("dead", "retries = 0\nmax_fails = 0", &[(dead, "")]),
        group("broken", "retries = 0\nmax_fails = 0", &[(closing, "")]),
        vs("live", ""),
        file.display()
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    // No server to be reached: 503 with the page, its type and Retry-After.
    let a = get(&c, addr, "/gone/x").await;
    assert_eq!(a.status, 503, "{}", a.text());
    assert_eq!(a.text(), "<h1>We are back soon</h1>\n");
    assert_eq!(a.headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(a.headers["retry-after"], "1");
    // A server that closes without answering: 502, the same page.
    let a = get(&c, addr, "/broken").await;
    assert_eq!(a.status, 502, "{}", a.text());
    assert_eq!(a.text(), "<h1>We are back soon</h1>\n");
    // The server's own 503 is its own.
    let a = get(&c, addr, "/status/503").await;
    assert_eq!((a.status, a.origin()), (503, "o".to_string()));
    assert!(!a.text().contains("back soon"), "{}", a.text());
    // A reload reads the file again.
    std::fs::write(&file, "<h1>Maintenance until noon</h1>\n").unwrap();
    p.replace(Config::parse(&text, "test.toml").unwrap().adc)
        .await
        .unwrap();
    let a = get(&c, addr, "/gone/x").await;
    assert_eq!(a.text(), "<h1>Maintenance until noon</h1>\n");
    assert_eq!(get(&c, addr, "/echo").await.status, 200);
}

/// A canary rule (`share = "30%"`): about that share of the clients reach the canary group,
/// and each client stays on its side, whichever connection it comes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_of_the_clients_goes_to_the_canary_and_stays_there() {
    let (stable, canary) = (
        Origin::start("stable", Duration::ZERO).await,
        Origin::start("canary", Duration::ZERO).await,
    );
    let text = format!(
        "{}{}{}[[virtual_server.rule]]\nname = \"canary\"\nshare = \"30%\"\ngroup = \"canary\"\n",
        group("stable", "", &[(stable.addr, "")]),
        group("canary", "", &[(canary.addr, "")]),
        vs("stable", "accept_proxy_protocol = true"),
    );
    let (_p, addr) = proxy(&text).await;
    let origin_for = |i: u32| async move {
        let client = std::net::Ipv4Addr::from(0xc633_6400 + i); // 198.51.100.0/22
        let answer = raw(
            addr,
            format!(
                "PROXY TCP4 {client} 10.0.0.1 40000 80\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .to_ascii_lowercase();
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        answer.contains("x-origin: canary")
    };
    let mut first = Vec::new();
    for i in 0..200 {
        first.push(origin_for(i).await);
    }
    let on_canary = first.iter().filter(|c| **c).count();
    assert!(
        (35..=85).contains(&on_canary),
        "{on_canary} of 200 clients on the canary"
    );
    for i in 0..40 {
        assert_eq!(origin_for(i).await, first[i as usize], "client {i} moved");
    }
}
