//! The load tools of `headway bench adc`: wrk (HTTP/1.1) and h2load (HTTP/2), their command
//! lines and the parsing of what they print.
//!
//! [`wrk_argv`] and [`h2load_argv`] build the command lines; [`parse_wrk`] and [`parse_h2load`]
//! turn the tools' text output into an [`Outcome`] (pure; errors name the missing line and
//! quote the end of the output). Running them is the parent module's job (a bounded
//! [`super::procs::Proc`]).

use std::path::Path;

/// How requests are spread over connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerConnection {
    /// `Connection: close` on every request: one request per connection.
    One,
    /// `Connection: close` on every 10th request of a wrk thread (a Lua script).
    Ten,
    /// Keep-alive: as many requests as fit in the run.
    Unlimited,
}

/// The load: where, how hard, how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    /// The full URL (`http://127.0.0.1:PORT/corpus/random/128`).
    pub url: String,
    /// Load-tool threads.
    pub threads: u32,
    /// Concurrent connections in all.
    pub connections: u32,
    /// Seconds to run.
    pub seconds: u32,
}

/// The wrk command line for `load` with `per` requests per connection; `script` is the file
/// holding [`super::config::TEN_PER_CONNECTION_LUA`] (used for [`PerConnection::Ten`] only).
pub fn wrk_argv(load: &Load, per: PerConnection, script: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "wrk".into(),
        "-t".into(),
        load.threads.to_string(),
        "-c".into(),
        load.connections.to_string(),
        "-d".into(),
        format!("{}s", load.seconds),
        "--timeout".into(),
        "5s".into(),
        "--latency".into(),
    ];
    match per {
        PerConnection::One => v.extend(["-H".into(), "Connection: close".into()]),
        PerConnection::Ten => v.extend(["-s".into(), script.display().to_string()]),
        PerConnection::Unlimited => {}
    }
    v.push(load.url.clone());
    v
}

/// A paced load: `rate` requests/s offered in all, on a schedule that does not wait for answers
/// (see [`super::config::PACED_LUA`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Requests per second in all.
    pub rate: u32,
}

impl Pace {
    /// Milliseconds between two requests of one of `threads` load-tool threads (the paced
    /// script's schedule): `threads × 1000 / rate`.
    pub fn period_ms(self, threads: u32) -> f64 {
        f64::from(threads.max(1)) * 1000.0 / f64::from(self.rate.max(1))
    }

    /// Requests per second for each of `connections` (h2load's `--rps`).
    pub fn per_connection(self, connections: u32) -> f64 {
        f64::from(self.rate) / f64::from(connections.max(1))
    }
}

/// The wrk command line for `load` paced by `pace`, with `per` requests per connection;
/// `script` is the file holding [`super::config::PACED_LUA`].
pub fn paced_wrk_argv(load: &Load, per: PerConnection, script: &Path, pace: Pace) -> Vec<String> {
    let mut v = wrk_argv(load, PerConnection::Unlimited, script);
    let url = v.pop().unwrap_or_default();
    let per = match per {
        PerConnection::One => 1,
        PerConnection::Ten => 10,
        PerConnection::Unlimited => 0,
    };
    v.extend([
        "-s".into(),
        script.display().to_string(),
        url,
        "--".into(),
        per.to_string(),
        format!("{:.4}", pace.period_ms(load.threads)),
    ]);
    v
}

/// The h2load command line (HTTP/2 with prior knowledge, `streams` concurrent streams per
/// connection, timing-based for `load.seconds`).
pub fn h2load_argv(load: &Load, streams: u32) -> Vec<String> {
    vec![
        "h2load".into(),
        "-t".into(),
        load.threads.min(load.connections).to_string(),
        "-c".into(),
        load.connections.to_string(),
        "-m".into(),
        streams.to_string(),
        "-D".into(),
        load.seconds.to_string(),
        load.url.clone(),
    ]
}

/// [`h2load_argv`] paced by `pace` (`--rps` per connection).
pub fn paced_h2load_argv(load: &Load, streams: u32, pace: Pace) -> Vec<String> {
    let mut v = h2load_argv(load, streams);
    let url = v.pop().unwrap_or_default();
    v.push(format!(
        "--rps={:.2}",
        pace.per_connection(load.connections)
    ));
    v.push(url);
    v
}

/// What one load run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Responses received (any status).
    pub responses: u64,
    /// Responses with a 2xx or 3xx status.
    pub good: u64,
    /// Seconds the tool measured over.
    pub seconds: f64,
    /// Socket-level failures (connect, read, write errors and timeouts).
    pub socket_errors: u64,
    /// Mean latency, milliseconds.
    pub latency_mean_ms: Option<f64>,
    /// 99th-percentile latency, milliseconds (wrk only).
    pub latency_p99_ms: Option<f64>,
}

impl Outcome {
    /// Good responses per second: responses with an error status do not count.
    pub fn good_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.good as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Responses with a status other than 2xx/3xx.
    pub fn bad_status(&self) -> u64 {
        self.responses.saturating_sub(self.good)
    }
}

/// Why a load tool's output could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ParseError {
    /// A line the tool always prints is not there (it failed, or printed something else).
    #[error("{tool} printed no `{line}` line; its output ends with:\n{tail}")]
    Missing {
        /// `wrk` or `h2load`.
        tool: &'static str,
        /// The start of the missing line.
        line: &'static str,
        /// The last lines of the output.
        tail: String,
    },
    /// A line is there but a number in it is not.
    #[error("{tool}: cannot read {what} in {line:?}")]
    Malformed {
        /// `wrk` or `h2load`.
        tool: &'static str,
        /// What was expected.
        what: &'static str,
        /// The offending line.
        line: String,
    },
}

/// Reads wrk's report (with `--latency`):
///
/// ```text
///     Latency     4.89ms    2.03ms  18.27ms   72.63%
///      99%   11.03ms
///   23488 requests in 2.01s, 8.02MB read
///   Socket errors: connect 0, read 12, write 0, timeout 0
///   Non-2xx or 3xx responses: 5
/// Requests/sec:  11676.89
/// ```
///
/// The `requests in` and `Requests/sec:` lines are required; the others are optional.
pub fn parse_wrk(text: &str) -> Result<Outcome, ParseError> {
    const TOOL: &str = "wrk";
    let malformed = |what, line: &str| ParseError::Malformed {
        tool: TOOL,
        what,
        line: line.trim().to_string(),
    };
    let mut requests = None;
    let mut rate_seen = false;
    let (mut socket_errors, mut bad, mut mean, mut p99) = (0u64, 0u64, None, None);
    for line in text.lines() {
        let t = line.trim();
        if let Some((n, rest)) = t.split_once(" requests in ") {
            let n: u64 = n.parse().map_err(|_| malformed("the request count", t))?;
            let d = rest.split(',').next().unwrap_or_default();
            let secs = wrk_time(d).ok_or_else(|| malformed("the duration", t))?;
            requests = Some((n, secs));
        } else if let Some(rest) = t.strip_prefix("Requests/sec:") {
            rest.trim()
                .parse::<f64>()
                .map_err(|_| malformed("the rate", t))?;
            rate_seen = true;
        } else if let Some(rest) = t.strip_prefix("Socket errors:") {
            for part in rest.split(',') {
                let n = part
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse::<u64>().ok());
                socket_errors += n.ok_or_else(|| malformed("the socket errors", t))?;
            }
        } else if let Some(rest) = t.strip_prefix("Non-2xx or 3xx responses:") {
            bad = rest
                .trim()
                .parse()
                .map_err(|_| malformed("the non-2xx count", t))?;
        } else if let Some(rest) = t.strip_prefix("Latency ") {
            // `Latency  4.89ms …` (thread stats); `Latency Distribution` heads the percentiles.
            mean = mean.or_else(|| rest.split_whitespace().next().and_then(wrk_time));
        } else if let Some(rest) = t.strip_prefix("99%") {
            p99 = wrk_time(rest.trim());
        }
    }
    let missing = |line| ParseError::Missing {
        tool: TOOL,
        line,
        tail: crate::lab::tail(text, 8),
    };
    let (n, seconds) = requests.ok_or_else(|| missing("N requests in"))?;
    if !rate_seen {
        return Err(missing("Requests/sec:"));
    }
    Ok(Outcome {
        responses: n,
        good: n.saturating_sub(bad),
        seconds,
        socket_errors,
        latency_mean_ms: mean.map(|s| s * 1e3),
        latency_p99_ms: p99.map(|s| s * 1e3),
    })
}

/// Reads h2load's report:
///
/// ```text
/// finished in 2.01s, 24979.50 req/s, 6.55MB/s
/// requests: 49959 total, 50599 started, 49959 done, 49959 succeeded, 0 failed, 0 errored, 0 timeout
/// time for request:      643us       1.06s     23.61ms     82.60ms    99.36%
/// ```
///
/// `succeeded` counts 2xx/3xx responses, `failed` the requests that got no response.
pub fn parse_h2load(text: &str) -> Result<Outcome, ParseError> {
    const TOOL: &str = "h2load";
    let malformed = |what, line: &str| ParseError::Malformed {
        tool: TOOL,
        what,
        line: line.trim().to_string(),
    };
    let (mut seconds, mut counts, mut mean) = (None, None, None);
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("finished in ") {
            let d = rest.split(',').next().unwrap_or_default();
            seconds = Some(wrk_time(d).ok_or_else(|| malformed("the duration", t))?);
        } else if let Some(rest) = t.strip_prefix("requests:") {
            let field = |name: &str| -> Option<u64> {
                rest.split(',').find_map(|p| {
                    let mut w = p.split_whitespace();
                    let n = w.next()?;
                    (w.next()? == name).then(|| n.parse().ok()).flatten()
                })
            };
            match (field("done"), field("succeeded"), field("failed")) {
                (Some(d), Some(s), Some(f)) => counts = Some((d, s, f)),
                _ => return Err(malformed("the request counts", t)),
            }
        } else if let Some(rest) = t.strip_prefix("time for request:") {
            mean = rest.split_whitespace().nth(2).and_then(wrk_time);
        }
    }
    let missing = |line| ParseError::Missing {
        tool: TOOL,
        line,
        tail: crate::lab::tail(text, 8),
    };
    let seconds = seconds.ok_or_else(|| missing("finished in"))?;
    let (done, succeeded, failed) = counts.ok_or_else(|| missing("requests:"))?;
    Ok(Outcome {
        responses: done.saturating_sub(failed).max(succeeded),
        good: succeeded,
        seconds,
        socket_errors: failed,
        latency_mean_ms: mean.map(|s| s * 1e3),
        latency_p99_ms: None,
    })
}

/// A duration as wrk and h2load print it (`623.00us`, `4.89ms`, `2.01s`, `1.00m`, `1.00h`), in
/// seconds.
pub fn wrk_time(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Some(v * scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    const WRK: &str = "Running 2s test @ http://127.0.0.1:18003/corpus/random/128
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.89ms    2.03ms  18.27ms   72.63%
    Req/Sec     5.87k   692.98     7.06k    67.50%
  Latency Distribution
     50%    4.62ms
     75%    6.00ms
     90%    7.50ms
     99%   11.03ms
  23488 requests in 2.01s, 8.02MB read
  Socket errors: connect 1, read 12, write 0, timeout 3
  Non-2xx or 3xx responses: 88
Requests/sec:  11676.89
Transfer/sec:      3.99MB
";

    const H2LOAD: &str = "starting benchmark...
spawning thread #0: 32 total client(s). Timing-based test with 0s of warm-up time and 2s of main duration for measurements.
Application protocol: h2c

finished in 2.01s, 24979.50 req/s, 6.55MB/s
requests: 49959 total, 50599 started, 49959 done, 49900 succeeded, 9 failed, 9 errored, 0 timeout
status codes: 49900 2xx, 0 3xx, 0 4xx, 50 5xx
traffic: 13.11MB (13741999) total, 6.15MB (6444840) headers (space savings 34.18%), 6.10MB (6394752) data
                     min         max         mean         sd        +/- sd
time for request:      643us       1.06s     23.61ms     82.60ms    99.36%
";

    #[test]
    fn wrk_report_is_read_with_errors_and_latency() {
        let o = parse_wrk(WRK).unwrap();
        assert_eq!(o.responses, 23488);
        assert_eq!(o.good, 23488 - 88);
        assert_eq!(o.bad_status(), 88);
        assert_eq!(o.seconds, 2.01);
        assert_eq!(o.socket_errors, 16);
        assert!((o.latency_mean_ms.unwrap() - 4.89).abs() < 1e-9);
        assert!((o.latency_p99_ms.unwrap() - 11.03).abs() < 1e-9);
        assert!((o.good_per_second() - 23400.0 / 2.01).abs() < 1e-6);
    }

    #[test]
    fn a_clean_wrk_report_without_error_lines_is_read() {
        let text = "  100 requests in 1.00m, 1.00KB read\nRequests/sec:      1.67\n";
        let o = parse_wrk(text).unwrap();
        assert_eq!((o.responses, o.good, o.socket_errors), (100, 100, 0));
        assert_eq!(o.seconds, 60.0);
        assert_eq!(o.latency_mean_ms, None);
    }

    #[test]
    fn wrk_errors_name_the_missing_line_and_quote_the_output() {
        let e = parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n").unwrap_err();
        assert!(matches!(
            e,
            ParseError::Missing {
                line: "N requests in",
                ..
            }
        ));
        assert!(e.to_string().contains("Connection refused"), "{e}");
        let e = parse_wrk("  7 requests in 1.00s, 1KB read\n").unwrap_err();
        assert!(matches!(
            e,
            ParseError::Missing {
                line: "Requests/sec:",
                ..
            }
        ));
        let e = parse_wrk("  x requests in 1.00s, 1KB read\nRequests/sec: 7\n").unwrap_err();
        assert!(
            matches!(
                e,
                ParseError::Malformed {
                    what: "the request count",
                    ..
                }
            ),
            "{e}"
        );
        let e = parse_wrk("  7 requests in 1.00parsec, 1KB read\nRequests/sec: 7\n").unwrap_err();
        assert!(
            matches!(
                e,
                ParseError::Malformed {
                    what: "the duration",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn h2load_report_is_read() {
        let o = parse_h2load(H2LOAD).unwrap();
        assert_eq!(o.good, 49900);
        assert_eq!(o.socket_errors, 9);
        assert_eq!(o.responses, 49950);
        assert_eq!(o.bad_status(), 50);
        assert_eq!(o.seconds, 2.01);
        assert!((o.latency_mean_ms.unwrap() - 23.61).abs() < 1e-9);
    }

    #[test]
    fn h2load_that_could_not_negotiate_is_an_error() {
        let text = "starting benchmark...\nNo protocol negotiated. Exiting...\n";
        let e = parse_h2load(text).unwrap_err();
        assert!(e.to_string().contains("No protocol negotiated"), "{e}");
    }

    #[test]
    fn times_in_every_unit() {
        assert_eq!(wrk_time("623.00us"), Some(623e-6));
        assert_eq!(wrk_time("4.00ms"), Some(4e-3));
        assert_eq!(wrk_time(" 2.5s "), Some(2.5));
        assert_eq!(wrk_time("1.50m"), Some(90.0));
        assert_eq!(wrk_time("1.00h"), Some(3600.0));
        assert_eq!(wrk_time("12"), None);
        assert_eq!(wrk_time("1.0parsec"), None);
    }

    #[test]
    fn command_lines() {
        let load = Load {
            url: "http://127.0.0.1:1/corpus/random/128".into(),
            threads: 2,
            connections: 64,
            seconds: 3,
        };
        let script = Path::new("/tmp/ten.lua");
        let one = wrk_argv(&load, PerConnection::One, script).join(" ");
        assert_eq!(
            one,
            "wrk -t 2 -c 64 -d 3s --timeout 5s --latency -H Connection: close http://127.0.0.1:1/corpus/random/128"
        );
        let ten = wrk_argv(&load, PerConnection::Ten, script).join(" ");
        assert!(ten.contains("-s /tmp/ten.lua") && !ten.contains("Connection"));
        let all = wrk_argv(&load, PerConnection::Unlimited, script).join(" ");
        assert!(!all.contains("-s ") && !all.contains("-H"));
        assert_eq!(
            h2load_argv(&load, 10).join(" "),
            "h2load -t 2 -c 64 -m 10 -D 3 http://127.0.0.1:1/corpus/random/128"
        );
        let pace = Pace { rate: 9_600 };
        let paced = paced_wrk_argv(&load, PerConnection::Ten, Path::new("/tmp/p.lua"), pace);
        assert_eq!(
            paced.join(" "),
            "wrk -t 2 -c 64 -d 3s --timeout 5s --latency -s /tmp/p.lua http://127.0.0.1:1/corpus/random/128 -- 10 0.2083"
        );
        assert_eq!(
            paced_h2load_argv(&load, 10, pace).join(" "),
            "h2load -t 2 -c 64 -m 10 -D 3 --rps=150.00 http://127.0.0.1:1/corpus/random/128"
        );
    }

    #[test]
    fn a_pace_spreads_its_rate_over_the_connections() {
        let pace = Pace { rate: 9_600 };
        assert!((pace.period_ms(2) - 0.208_333).abs() < 1e-6);
        assert!((pace.period_ms(0) - 0.104_166).abs() < 1e-6);
        assert_eq!(Pace { rate: 0 }.period_ms(2), 2_000.0);
        assert!((pace.per_connection(64) - 150.0).abs() < 1e-9);
    }

    /// A minimal HTTP/1.1 server on loopback counting the requests and connections it saw;
    /// it answers `ok` 10 ms after each request and closes after a request that asks it to.
    fn counting_server() -> (std::net::SocketAddr, Arc<(AtomicU64, AtomicU64)>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let c = counts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                c.1.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut pending = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf) else { return };
                        if n == 0 {
                            return;
                        }
                        pending.extend_from_slice(&buf[..n]);
                        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head =
                                String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
                            pending.drain(..end + 4);
                            c.0.fetch_add(1, Ordering::SeqCst);
                            let close = head.contains("connection: close");
                            std::thread::sleep(std::time::Duration::from_millis(10));
                            let answer: &[u8] = if close {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                            } else {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                            };
                            if stream.write_all(answer).is_err() || close {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, counts)
    }

    /// The paced script run by the real wrk (installed by `scripts/setup.sh`): the rate is the
    /// one asked for, and the connections carry the requests asked for.
    #[test]
    fn wrk_with_the_paced_script_keeps_to_its_rate_and_its_requests_per_connection() {
        let dir = std::env::temp_dir().join(format!("headway-paced-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("paced.lua");
        std::fs::write(&script, crate::bench::adc::config::PACED_LUA).unwrap();
        // 200 requests/s over 4 connections: 400 in 2 s, whatever the latency (10 ms here: a
        // fixed wait of 20 ms after each answer would give 4 / 30 ms, 267 in 2 s).
        let pace = Pace { rate: 200 };
        for (per, name) in [
            (PerConnection::Unlimited, "keep-alive"),
            (PerConnection::Ten, "10 per connection"),
            (PerConnection::One, "1 per connection"),
        ] {
            let (addr, counts) = counting_server();
            let load = Load {
                url: format!("http://{addr}/"),
                threads: 1,
                connections: 4,
                seconds: 2,
            };
            let argv = paced_wrk_argv(&load, per, &script, pace);
            let out = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .output()
                .expect("wrk is not installed: run `bash scripts/setup.sh` (as root)");
            let text = String::from_utf8_lossy(&out.stdout);
            let outcome = parse_wrk(&text).unwrap();
            let requests = counts.0.load(Ordering::SeqCst);
            let connections = counts.1.load(Ordering::SeqCst);
            assert!(
                (330..=430).contains(&requests),
                "{name}: {requests} requests in 2 s at 200/s: {text}"
            );
            assert!(
                outcome.good > 0 && outcome.good <= requests,
                "{name}: {text}"
            );
            // wrk opens one connection more than asked at its start, to check the address.
            let want = match per {
                PerConnection::Unlimited => 4..=5,
                PerConnection::Ten => requests / 10..=requests / 10 + 6,
                PerConnection::One => requests..=requests + 5,
            };
            assert!(
                want.contains(&connections),
                "{name}: {connections} connections for {requests} requests, want {want:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
