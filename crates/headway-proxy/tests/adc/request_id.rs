//! Request IDs: made or kept, sent to the server, returned to the client (the proxy's own
//! answers too) and written to the access log.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_carries_its_id_to_the_server_the_client_and_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}[[virtual_server.rule]]\npath = \"/refused\"\nrespond = {{ status = 403 }}\n",
        group("g", "", &[(o.addr, "")]),
        vs(
            "g",
            &format!(
                "request_id = \"X-Request-ID\"\naccess_log = \"{}\"\naccess_log_format = \"json\"",
                log.display()
            )
        ),
    );
    let (_p, addr) = proxy(&text).await;
    let c = client();
    let seen_by_server = |a: &Answer| {
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        let ids = v["headers"]["x-request-id"].as_array().unwrap().clone();
        assert_eq!(ids.len(), 1, "{v}");
        ids[0].as_str().unwrap().to_string()
    };
    // A new ID: the server and the client see the same one.
    let a = get(&c, addr, "/echo").await;
    let made = a.headers["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(made.len(), 32);
    assert!(made.bytes().all(|b| b.is_ascii_hexdigit()), "{made}");
    assert_eq!(seen_by_server(&a), made);
    // The next request gets another.
    let b = get(&c, addr, "/echo").await;
    assert_ne!(b.headers["x-request-id"], made.as_str());
    // One from the balancer in front is kept; one that is no ID is replaced.
    let kept = send(
        &c,
        "GET",
        addr,
        "/echo",
        &[("x-request-id", "lb-7f3a")],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(kept.headers["x-request-id"], "lb-7f3a");
    assert_eq!(seen_by_server(&kept), "lb-7f3a");
    let long = "x".repeat(200);
    let replaced = send(&c, "GET", addr, "/echo", &[("x-request-id", &long)], b"")
        .await
        .unwrap();
    assert_eq!(seen_by_server(&replaced).len(), 32);
    // The proxy's own answers carry one too.
    let refused = get(&c, addr, "/refused").await;
    assert_eq!(refused.status, 403);
    let refused_id = refused.headers["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(refused_id.len(), 32);
    // And the log has each request's.
    let lines = json_log_lines(&log, 5).await;
    let logged: Vec<&str> = lines
        .iter()
        .map(|l| l["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(logged[0], made);
    assert_eq!(logged[2], "lb-7f3a");
    assert_eq!(logged[4], refused_id);
}

/// Header rule values filled per request: X-Real-IP from the client's address (the PROXY
/// header's), the request ID in a response header of another name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_rules_fill_in_the_client_and_the_request_id() {
    let (_o, _p, addr) = before_one_origin(
        "request_id = \"X-Request-ID\"\naccept_proxy_protocol = true\n\
         [virtual_server.request_headers]\n\
         set = { \"X-Real-IP\" = \"{client_ip}\", \"X-Client\" = \"{client_ip}:{client_port} via {virtual_server} ({scheme})\" }\n\
         [virtual_server.response_headers]\nadd = { \"X-Trace\" = \"id={request_id}\" }\n",
    )
    .await;
    let answer = raw(
        addr,
        b"PROXY TCP4 203.0.113.9 10.0.0.1 40000 80\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\
          X-Real-IP: 6.6.6.6\r\nConnection: close\r\n\r\n",
    )
    .await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let h = &v["headers"];
    assert_eq!(h["x-real-ip"], serde_json::json!(["203.0.113.9"]), "{v}");
    assert_eq!(h["x-client"][0], "203.0.113.9:40000 via front (http)");
    let id = h["x-request-id"][0].as_str().unwrap();
    let head = head.to_ascii_lowercase();
    assert!(head.contains(&format!("x-trace: id={id}\r\n")), "{head}");
    assert!(head.contains(&format!("x-request-id: {id}\r\n")), "{head}");
}
