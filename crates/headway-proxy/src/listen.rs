//! Flood defense at the listener: the host settings a SYN flood meets, and a deadline for
//! clients that connect and say nothing.
//!
//! # What it owns
//!
//! - [`ListenHost`] and [`findings`]: when a virtual server starts listening, the SYN-cookie
//!   switch (`net.ipv4.tcp_syncookies`) and the cap on the accept queue (`net.core.somaxconn`)
//!   are read and compared with the backlog asked for; what would weaken the listener under a
//!   flood is logged as a warning that says which sysctl to change.
//!
//! An `http` or `https` listener also defers accepting (`TCP_DEFER_ACCEPT`, set where it is
//! bound, `crate::runtime`): the kernel hands a connection out once its first bytes are in,
//! so a client that connects and says nothing holds neither a descriptor nor a task for about
//! a second, and the worker is woken once per connection, to accept and read together.
//!
//! The deadline for silent clients is enforced where the first bytes are read: a cleartext
//! HTTP client must send its first bytes within the virtual server's `request_header_timeout`
//! of being accepted (`crate::http::serve_connection`), an https client must finish its
//! handshake within it (`crate::tls`). Without it, such a client would hold its connection (a
//! file descriptor and a task) for the whole `client_idle_timeout` (180 s by default), the
//! cheapest slow-client attack: open many connections, send nothing.
//!
//! The rest of the flood defense lives elsewhere and is reused as is: per-client connection
//! and rate limits ([`crate::limits`]), the request header timeout and the idle timeout (the
//! L7 path), and the kernel's SYN cookies, which answer a SYN flood without keeping state.
//!
//! # Why SYN cookies and a large backlog
//!
//! A spoofed SYN flood fills the SYN queue (half-open connections) with requests that never
//! complete. With `tcp_syncookies = 1` the kernel, once that queue is full, answers further
//! SYNs with a cookie in the sequence number instead of keeping state (RFC 4987 §3.6), so real
//! clients still complete their handshakes; with it off, they are dropped with the flood. The
//! listen backlog bounds both the accept queue and the SYN queue; Linux caps it at
//! `net.core.somaxconn` without an error, so the cap is reported here.

/// The host settings a listener under a SYN flood depends on, read from `/proc/sys` (the
/// calling thread's network namespace). `None` when unreadable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenHost {
    /// `net.ipv4.tcp_syncookies`: 0 off, 1 when the SYN queue overflows, 2 always.
    pub syncookies: Option<u32>,
    /// `net.core.somaxconn`: the largest backlog `listen` takes.
    pub somaxconn: Option<u32>,
}

impl ListenHost {
    /// Reads the settings.
    pub fn read() -> ListenHost {
        let num = |p: &str| {
            std::fs::read_to_string(format!("/proc/sys/{p}"))
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
        };
        ListenHost {
            syncookies: num("net/ipv4/tcp_syncookies"),
            somaxconn: num("net/core/somaxconn"),
        }
    }
}

/// What weakens a listener asking for `backlog` on a host with `host`'s settings, each finding
/// with the sysctl that fixes it. Empty when nothing does.
pub fn findings(backlog: u32, host: &ListenHost) -> Vec<String> {
    let mut out = Vec::new();
    if host.syncookies == Some(0) {
        out.push(
            "SYN cookies are off (net.ipv4.tcp_syncookies = 0): a SYN flood fills the SYN \
             queue and real clients are refused with it; turn them on with `sysctl -w \
             net.ipv4.tcp_syncookies=1`"
                .to_string(),
        );
    }
    if let Some(max) = host.somaxconn {
        if backlog > max {
            out.push(format!(
                "the listen backlog {backlog} is capped at net.core.somaxconn = {max}: raise it \
                 with `sysctl -w net.core.somaxconn={backlog}`"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_off_and_a_capped_backlog_are_reported_with_their_fix() {
        let good = ListenHost {
            syncookies: Some(1),
            somaxconn: Some(4096),
        };
        assert!(findings(4096, &good).is_empty());
        assert!(findings(100, &ListenHost::default()).is_empty());
        let f = findings(
            65535,
            &ListenHost {
                syncookies: Some(0),
                somaxconn: Some(4096),
            },
        );
        assert_eq!(f.len(), 2);
        assert!(
            f[0].contains("sysctl -w net.ipv4.tcp_syncookies=1"),
            "{f:?}"
        );
        assert!(
            f[1].contains("65535 is capped at net.core.somaxconn = 4096"),
            "{f:?}"
        );
        assert!(f[1].contains("sysctl -w net.core.somaxconn=65535"), "{f:?}");
        // Always-on cookies are fine.
        let always = ListenHost {
            syncookies: Some(2),
            somaxconn: None,
        };
        assert!(findings(1 << 20, &always).is_empty());
    }
}
