//! `GET /ws/echo`: a WebSocket (RFC 6455) endpoint that sends every text and binary message
//! back as it came, answers pings, and closes when the client does — the server side of the
//! lab's and tests' WebSocket traffic through the ADC.
//!
//! The opening handshake is checked here ([`accept`]: `GET`, `Upgrade: websocket`,
//! `Connection: upgrade`, version 13, a key) and answered with `101 Switching Protocols` by the
//! server module; hyper then hands the connection over and [`echo`] speaks WebSocket on it
//! (tokio-tungstenite's framing).

use futures_util::{SinkExt as _, StreamExt as _};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The `Sec-WebSocket-Accept` value for a valid opening handshake, or the status and reason
/// to refuse it with.
pub(crate) fn accept(
    method: &Method,
    headers: &HeaderMap,
) -> Result<HeaderValue, (StatusCode, &'static str)> {
    if method != Method::GET {
        return Err((StatusCode::METHOD_NOT_ALLOWED, "a WebSocket opens with GET"));
    }
    let has = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if !has(header::UPGRADE, "websocket") || !has(header::CONNECTION, "upgrade") {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "this endpoint speaks WebSocket: send Upgrade: websocket and Connection: upgrade",
        ));
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err((StatusCode::UPGRADE_REQUIRED, "WebSocket version 13 only"));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err((StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing"));
    };
    HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
        .map_err(|_| (StatusCode::BAD_REQUEST, "bad Sec-WebSocket-Key"))
}

/// Echoes messages on the connection `upgrade` hands over until the client closes.
pub(crate) async fn echo(upgrade: hyper::upgrade::OnUpgrade) {
    let io = match upgrade.await {
        Ok(io) => io,
        Err(e) => {
            tracing::debug!(error = %e, "WebSocket upgrade failed");
            return;
        }
    };
    let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, None).await;
    while let Some(msg) = ws.next().await {
        let reply = match msg {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => m,
            // Pings are answered by the library as the stream is read; a close is answered and
            // ends the stream.
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "WebSocket connection ended");
                return;
            }
        };
        if let Err(e) = ws.send(reply).await {
            tracing::debug!(error = %e, "WebSocket connection ended");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        h.insert(
            header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        h
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        // RFC 6455 §1.3's worked example.
        let v = accept(&Method::GET, &handshake()).expect("valid");
        assert_eq!(v, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn incomplete_handshakes_are_refused_with_the_reason() {
        let mut h = handshake();
        h.remove(header::SEC_WEBSOCKET_KEY);
        assert_eq!(
            accept(&Method::GET, &h).unwrap_err().0,
            StatusCode::BAD_REQUEST
        );
        let mut h = handshake();
        h.insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("8"));
        assert_eq!(
            accept(&Method::GET, &h).unwrap_err().0,
            StatusCode::UPGRADE_REQUIRED
        );
        let mut h = handshake();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        assert_eq!(
            accept(&Method::GET, &h).unwrap_err().0,
            StatusCode::UPGRADE_REQUIRED
        );
        assert_eq!(
            accept(&Method::POST, &handshake()).unwrap_err().0,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
