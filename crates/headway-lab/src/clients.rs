//! `headway lab tool clients`: ordinary clients at a fixed request rate, each request on a new
//! connection, reporting how many succeeded and how long they took — the "normal clients" of
//! the flood scenario.
//!
//! Open loop: request `i` starts at `i / rate` seconds whatever happened to the others, so a
//! server that slows down under a flood meets the same offered load (a closed loop would back
//! off and hide it). Each request connects, sends `GET PATH` with `Connection: close`, and reads
//! the response to its end; it succeeds with status 200 within `--timeout` (connect included:
//! a SYN the server dropped is retransmitted after 1 s, which shows in the latency). A request
//! that cannot start because `--max-in-flight` requests are open counts as failed.
//!
//! Output: `ready`, then one line `result {json}` ([`ClientsReport`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use headway_core::units::parse_duration;
use headway_core::SystemClock;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `clients` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientsArgs {
    /// The server.
    #[arg(long)]
    pub to: SocketAddr,
    /// The URL path.
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Requests per second (each on a new connection).
    #[arg(long, default_value_t = 50)]
    pub rate: u32,
    /// How long to keep starting requests.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// A request not answered within this long (connect included) fails.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Requests open at once; a request due beyond it fails at once.
    #[arg(long, default_value_t = 2000)]
    pub max_in_flight: usize,
}

/// What the clients saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientsReport {
    /// Requests started (or due).
    pub requests: u64,
    /// Answered with 200 and a whole body in time.
    pub ok: u64,
    /// Connect did not complete in time.
    pub connect_timeouts: u64,
    /// Connect refused or reset.
    pub connect_errors: u64,
    /// Connected, but no whole 200 response in time.
    pub response_failures: u64,
    /// Due while `max_in_flight` requests were open.
    pub skipped: u64,
    /// Latency of every successful request, seconds, sorted.
    pub latencies: Vec<f64>,
}

impl ClientsReport {
    /// Share of requests that succeeded, 0–1 (1 without requests).
    pub fn success(&self) -> f64 {
        if self.requests == 0 {
            1.0
        } else {
            self.ok as f64 / self.requests as f64
        }
    }

    /// The `q` quantile (0–1) of the successful requests' latency, seconds (nearest rank).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.latencies.is_empty() {
            return None;
        }
        let n = self.latencies.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        Some(self.latencies[rank - 1])
    }
}

/// The outcome of one request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Ok(f64),
    ConnectTimeout,
    ConnectError,
    ResponseFailure,
}

/// Runs the tool.
pub fn run(args: ClientsArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the client runtime")?;
    println!("ready");
    let report = rt.block_on(drive(args));
    println!("result {}", serde_json::to_string(&report)?);
    Ok(())
}

/// Starts the requests on schedule and gathers their outcomes.
pub async fn drive(args: ClientsArgs) -> ClientsReport {
    let rate = args.rate.max(1);
    let total = (args.duration.as_secs_f64() * f64::from(rate)).round() as u64;
    let start = tokio::time::Instant::from_std(SystemClock::now());
    let request = Arc::new(format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: headway-lab\r\nConnection: close\r\n\r\n",
        args.path, args.to
    ));
    let mut tasks = tokio::task::JoinSet::new();
    let mut report = ClientsReport::default();
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / f64::from(rate));
        // Collect what finished while waiting for the next start.
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(due) => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Ok(o) = done {
                        tally(&mut report, o);
                    }
                }
            }
        }
        report.requests += 1;
        if tasks.len() >= args.max_in_flight {
            report.skipped += 1;
            continue;
        }
        tasks.spawn(one(args.to, request.clone(), args.timeout));
    }
    while let Some(done) = tasks.join_next().await {
        if let Ok(o) = done {
            tally(&mut report, o);
        }
    }
    report.latencies.sort_by(f64::total_cmp);
    report
}

/// Counts one request's outcome.
fn tally(report: &mut ClientsReport, o: Outcome) {
    match o {
        Outcome::Ok(s) => {
            report.ok += 1;
            report.latencies.push(s);
        }
        Outcome::ConnectTimeout => report.connect_timeouts += 1,
        Outcome::ConnectError => report.connect_errors += 1,
        Outcome::ResponseFailure => report.response_failures += 1,
    }
}

/// One request on a new connection.
async fn one(to: SocketAddr, request: Arc<String>, timeout: Duration) -> Outcome {
    let began = SystemClock::now();
    let deadline = tokio::time::Instant::from_std(began + timeout);
    let mut s = match tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(to)).await {
        Err(_) => return Outcome::ConnectTimeout,
        Ok(Err(_)) => return Outcome::ConnectError,
        Ok(Ok(s)) => s,
    };
    let exchange = async {
        s.write_all(request.as_bytes()).await.ok()?;
        let mut buf = Vec::with_capacity(4096);
        s.read_to_end(&mut buf).await.ok()?;
        complete_200(&buf).then_some(())
    };
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(Some(())) => Outcome::Ok(SystemClock::now().duration_since(began).as_secs_f64()),
        _ => Outcome::ResponseFailure,
    }
}

/// Whether `buf` is a whole `200` response: its body as long as its `Content-Length` says (a
/// response without one counts whole, as the connection closed after it).
fn complete_200(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.lines();
    let ok = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .is_some_and(|s| s == "200");
    let length = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    ok && length.is_none_or(|n| buf.len() - (end + 4) == n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_200_responses_are_told_from_short_or_failed_ones() {
        assert!(complete_200(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
        ));
        assert!(!complete_200(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nhi"
        ));
        assert!(!complete_200(
            b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!complete_200(b"HTTP/1.1 200 OK\r\nContent-Le"));
        assert!(complete_200(b"HTTP/1.1 200 OK\r\n\r\nbody until close"));
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let r = ClientsReport {
            requests: 5,
            ok: 4,
            latencies: vec![0.1, 0.2, 0.3, 1.0],
            ..ClientsReport::default()
        };
        assert_eq!(r.quantile(0.5), Some(0.2));
        assert_eq!(r.quantile(0.99), Some(1.0));
        assert_eq!(r.quantile(0.0), Some(0.1));
        assert!((r.success() - 0.8).abs() < 1e-9);
        assert_eq!(ClientsReport::default().quantile(0.5), None);
        assert_eq!(ClientsReport::default().success(), 1.0);
    }

    #[tokio::test]
    async fn every_request_is_counted_once() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await;
                });
            }
        });
        let r = drive(ClientsArgs {
            to,
            path: "/".into(),
            rate: 200,
            duration: Duration::from_millis(100),
            timeout: Duration::from_secs(5),
            max_in_flight: 1000,
        })
        .await;
        assert_eq!(r.requests, 20);
        assert_eq!(r.ok, 20, "{r:?}");
        assert_eq!(r.latencies.len(), 20);
        assert!(r.latencies.windows(2).all(|w| w[0] <= w[1]));
    }
}
