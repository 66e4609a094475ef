//! `headway lab tool xfer-server|xfer`: many verified TCP transfers both ways, for correctness
//! runs through the WAN optimizer (`headway bench wanopt correctness`).
//!
//! This module owns a tiny request protocol, its server and its client. A connection carries
//! one transfer. The client sends one header line, `HWX1 <up|down> <kind> <size> <seed>\n`:
//!
//! - `down`: the server sends the corpus document `(kind, size, seed)` (see
//!   [`headway_origin::corpus::Document`]), then half-closes; the client reads to EOF and checks
//!   the byte count and SHA-256 against the document's;
//! - `up`: the client sends the document, then half-closes; the server reads to EOF and answers
//!   `<bytes> <sha256 hex>\n`, which the client checks. Both directions therefore also test that
//!   a half-close crosses the path without cutting the other direction.
//!
//! Every transfer ends in one [`Outcome`]: `ok`; `reset` (an I/O error: the path cut the
//! connection, which a restart of an appliance may do); `stalled` (no progress for the I/O
//! timeout); or `wrong` — a clean end with the wrong bytes, which must never happen.
//!
//! The plan ([`plan`]) is deterministic in its seed: sizes 0, 1 and the maximum, the rest
//! log-uniform in between, directions alternating at random, kinds mixed, and document seeds
//! drawn from a small pool so later transfers repeat (or share prefixes with) earlier ones —
//! the case deduplication has to get right.
//!
//! `xfer --stream up|down --duration 10s` is the bulk mode for throughput runs ([`stream`]):
//! one connection carrying the `random` stream of one seed (never repeating, so neither
//! compression nor dedup can remove any of it) for the duration. Down, the header asks for a
//! document of [`STREAM_SIZE`] bytes; the client compares every byte with the stream and cuts
//! the connection at the deadline. Up, the client sends for the duration, hashing what it sent,
//! half-closes, and checks the server's `<bytes> <sha256>` answer.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use headway_core::{Rng, SystemClock};
use headway_origin::corpus::{hex, Document, Kind};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Longest header line accepted by the server.
const MAX_HEADER: usize = 128;
/// Connections the server serves at once; more are refused (closed).
const MAX_CONNECTIONS: usize = 512;
/// I/O buffer size.
const BUF: usize = 64 * 1024;
/// The size a `--stream down` asks for: more than any run transfers.
pub const STREAM_SIZE: u64 = 1 << 50;

/// Which way the document travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// One planned transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Direction.
    pub way: Way,
    /// The document.
    pub kind: Kind,
    /// Its size in bytes.
    pub size: u64,
    /// Its seed.
    pub seed: u64,
}

impl Transfer {
    fn document(&self) -> Document {
        Document::new(self.kind, self.size, self.seed)
    }

    fn header(&self) -> String {
        let way = match self.way {
            Way::Up => "up",
            Way::Down => "down",
        };
        format!("HWX1 {way} {} {} {}\n", self.kind, self.size, self.seed)
    }
}

/// Parses a header line (without its newline).
pub fn parse_header(line: &str) -> Result<Transfer> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != 5 || f[0] != "HWX1" {
        bail!("not an xfer header: {line:?}");
    }
    let way = match f[1] {
        "up" => Way::Up,
        "down" => Way::Down,
        other => bail!("unknown direction {other:?}"),
    };
    Ok(Transfer {
        way,
        kind: f[2].parse()?,
        size: f[3].parse().context("bad size")?,
        seed: f[4].parse().context("bad seed")?,
    })
}

/// The deterministic plan of `count` transfers with sizes up to `max_size`.
pub fn plan(count: usize, max_size: u64, seed: u64) -> Vec<Transfer> {
    let mut rng = Rng::from_seed(seed);
    let kinds = [Kind::Doc, Kind::Random, Kind::Pdf, Kind::Html];
    (0..count)
        .map(|i| {
            let size = match i {
                0 => 0,
                1 => 1.min(max_size),
                2 => max_size,
                _ if max_size <= 1 => max_size,
                _ => (max_size as f64).powf(rng.unit()).round() as u64,
            };
            let kind = kinds[(rng.next_u64() % kinds.len() as u64) as usize];
            // A small pool of seeds: documents of one (kind, seed) are prefixes of each other.
            let doc_seed = rng.next_u64() % 6;
            let way = if rng.chance(0.5) { Way::Up } else { Way::Down };
            Transfer {
                way,
                kind,
                size: size.min(max_size),
                seed: doc_seed,
            }
        })
        .collect()
}

/// How one transfer ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "outcome", content = "detail")]
pub enum Outcome {
    /// Every byte arrived and matched.
    Ok,
    /// The connection failed with an error (reset, refused, broken pipe).
    Reset(String),
    /// No progress for the I/O timeout.
    Stalled(String),
    /// A clean end with wrong or missing bytes.
    Wrong(String),
}

/// The counts of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct XferReport {
    /// Transfers run.
    pub transfers: usize,
    /// Transfers that delivered every byte correctly.
    pub ok: usize,
    /// Transfers cut by an error.
    pub reset: usize,
    /// Transfers that stopped making progress.
    pub stalled: usize,
    /// Transfers that ended cleanly with wrong bytes (must be 0).
    pub wrong: usize,
    /// Bytes of the documents of the transfers that were ok.
    pub bytes_ok: u64,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// Up to ten examples of failures, `index: outcome`.
    pub failures: Vec<String>,
}

/// `xfer-server` arguments.
#[derive(Debug, clap::Args)]
pub struct XferServerArgs {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
}

/// `xfer` arguments.
#[derive(Debug, clap::Args)]
pub struct XferArgs {
    /// The xfer server.
    #[arg(long)]
    pub to: SocketAddr,
    /// Number of transfers.
    #[arg(long, default_value_t = 200)]
    pub transfers: usize,
    /// Transfers in flight at once.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// Largest document, in bytes.
    #[arg(long, default_value_t = 100_000_000)]
    pub max_size: u64,
    /// Seed of the plan.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A transfer without progress for this long is stalled.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub io_timeout: Duration,
    /// Instead of the plan: one bulk stream of non-repeating random bytes this way (`up`:
    /// client to server, `down`), verified, for `--duration`; prints a [`StreamReport`].
    #[arg(long, value_parser = parse_way)]
    pub stream: Option<Way>,
    /// How long `--stream` sends.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
}

/// `up` or `down`.
pub fn parse_way(s: &str) -> Result<Way, String> {
    match s {
        "up" => Ok(Way::Up),
        "down" => Ok(Way::Down),
        other => Err(format!("{other:?} is not a direction (up, down)")),
    }
}

/// What one bulk stream measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    /// Bytes that arrived and were verified.
    pub bytes: u64,
    /// Seconds from connecting to the last verified byte (up: to the server's answer).
    pub seconds: f64,
    /// Whether every byte that arrived was right (false: see `detail`).
    pub ok: bool,
    /// What went wrong, if anything.
    pub detail: String,
}

impl StreamReport {
    /// Verified bits per second.
    pub fn bps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9)
    }
}

/// One bulk stream of the `random` stream of `seed`, `way`, for `duration` (see the module
/// documentation). I/O errors before the deadline are errors; wrong bytes are a report with
/// `ok: false`.
pub fn stream(
    to: SocketAddr,
    way: Way,
    seed: u64,
    duration: Duration,
    io_timeout: Duration,
) -> Result<StreamReport> {
    let start = SystemClock::now();
    let mut sock = TcpStream::connect_timeout(&to, io_timeout)
        .with_context(|| format!("connecting to {to}"))?;
    sock.set_read_timeout(Some(io_timeout))?;
    sock.set_write_timeout(Some(io_timeout))?;
    let size = match way {
        Way::Up => 0,
        Way::Down => STREAM_SIZE,
    };
    let t = Transfer {
        way,
        kind: Kind::Random,
        size,
        seed,
    };
    sock.write_all(t.header().as_bytes())
        .context("sending the header")?;
    let doc = Document::new(Kind::Random, STREAM_SIZE, seed);
    let deadline = start + duration;
    let mut buf = vec![0u8; BUF];
    let mut offset = 0u64;
    match way {
        Way::Down => {
            let mut want = vec![0u8; BUF];
            while SystemClock::now() < deadline {
                let n = sock.read(&mut buf).context("receiving")?;
                if n == 0 {
                    bail!("the server ended the stream after {offset} bytes");
                }
                doc.fill(offset, &mut want[..n]);
                if buf[..n] != want[..n] {
                    let at = buf[..n].iter().zip(&want).position(|(a, b)| a != b);
                    return Ok(StreamReport {
                        bytes: offset,
                        seconds: (SystemClock::now() - start).as_secs_f64(),
                        ok: false,
                        detail: format!("wrong byte at {}", offset + at.unwrap_or(0) as u64),
                    });
                }
                offset += n as u64;
            }
            let seconds = (SystemClock::now() - start).as_secs_f64();
            // Cut the connection: the server's endless stream ends in an error on its side.
            drop(sock);
            Ok(StreamReport {
                bytes: offset,
                seconds,
                ok: true,
                detail: String::new(),
            })
        }
        Way::Up => {
            let mut hasher = Sha256::new();
            while SystemClock::now() < deadline {
                let n = doc.fill(offset, &mut buf);
                sock.write_all(&buf[..n]).context("sending")?;
                hasher.update(&buf[..n]);
                offset += n as u64;
            }
            sock.shutdown(Shutdown::Write).context("half-closing")?;
            let mut reply = String::new();
            sock.read_to_string(&mut reply)
                .context("reading the server's answer")?;
            let seconds = (SystemClock::now() - start).as_secs_f64();
            let want = format!("{offset} {}\n", hex(&hasher.finalize()));
            let ok = reply == want;
            Ok(StreamReport {
                bytes: if ok { offset } else { 0 },
                seconds,
                ok,
                detail: if ok {
                    String::new()
                } else {
                    format!("server saw {:?}, sent {:?}", reply.trim(), want.trim())
                },
            })
        }
    }
}

/// Serves transfers forever (one thread per connection, at most [`MAX_CONNECTIONS`]).
pub fn serve(listener: TcpListener) -> Result<()> {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let (stream, _) = match listener.accept() {
            Ok(x) => x,
            Err(e) => {
                eprintln!("xfer-server: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let active = active.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve_one(stream) {
                eprintln!("xfer-server: {e:#}");
            }
            active.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

fn serve_one(stream: TcpStream) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    stream.set_write_timeout(Some(Duration::from_secs(300)))?;
    let mut reader = BufReader::with_capacity(BUF, stream.try_clone()?);
    let mut line = Vec::new();
    (&mut reader)
        .take(MAX_HEADER as u64)
        .read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        bail!("no header line");
    }
    let t = parse_header(std::str::from_utf8(&line[..line.len() - 1])?)?;
    let mut stream = stream;
    match t.way {
        Way::Down => {
            let doc = t.document();
            let mut buf = vec![0u8; BUF];
            let mut offset = 0;
            loop {
                let n = doc.fill(offset, &mut buf);
                if n == 0 {
                    break;
                }
                stream.write_all(&buf[..n])?;
                offset += n as u64;
            }
            stream.shutdown(Shutdown::Write)?;
            // Wait for the client's end, so our FIN is not followed by a reset.
            std::io::copy(&mut reader, &mut std::io::sink())?;
        }
        Way::Up => {
            let (n, digest) = hash_to_end(&mut reader)?;
            writeln!(stream, "{n} {digest}")?;
            stream.shutdown(Shutdown::Write)?;
        }
    }
    Ok(())
}

fn hash_to_end(r: &mut impl Read) -> std::io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf)?;
        if k == 0 {
            return Ok((n, hex(&hasher.finalize())));
        }
        hasher.update(&buf[..k]);
        n += k as u64;
    }
}

/// The expected digests, computed once per document.
#[derive(Debug, Default)]
struct Digests(Mutex<HashMap<(Kind, u64, u64), String>>);

impl Digests {
    fn of(&self, doc: &Document) -> String {
        let key = (doc.kind(), doc.size(), doc.seed());
        if let Some(d) = self.0.lock().map(|m| m.get(&key).cloned()).ok().flatten() {
            return d;
        }
        let d = hex(&doc.sha256());
        if let Ok(mut m) = self.0.lock() {
            m.insert(key, d.clone());
        }
        d
    }
}

/// Runs one transfer against `to`.
pub fn run_one(to: SocketAddr, t: &Transfer, io_timeout: Duration) -> Outcome {
    run_one_with(to, t, io_timeout, &Digests::default())
}

fn run_one_with(to: SocketAddr, t: &Transfer, io_timeout: Duration, digests: &Digests) -> Outcome {
    let classify = |e: std::io::Error, what: &str| -> Outcome {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                Outcome::Stalled(format!("{what}: {e}"))
            }
            _ => Outcome::Reset(format!("{what}: {e}")),
        }
    };
    let mut stream = match TcpStream::connect_timeout(&to, io_timeout) {
        Ok(s) => s,
        Err(e) => return classify(e, "connect"),
    };
    let _ = stream.set_read_timeout(Some(io_timeout));
    let _ = stream.set_write_timeout(Some(io_timeout));
    if let Err(e) = stream.write_all(t.header().as_bytes()) {
        return classify(e, "header");
    }
    let doc = t.document();
    let expected = digests.of(&doc);
    match t.way {
        Way::Down => match hash_to_end(&mut stream) {
            Ok((n, digest)) if n == t.size && digest == expected => {
                let _ = stream.shutdown(Shutdown::Write);
                Outcome::Ok
            }
            Ok((n, digest)) => Outcome::Wrong(format!(
                "received {n} of {} bytes, sha256 {digest} (expected {expected})",
                t.size
            )),
            Err(e) => classify(e, "download"),
        },
        Way::Up => {
            let mut buf = vec![0u8; BUF];
            let mut offset = 0;
            loop {
                let n = doc.fill(offset, &mut buf);
                if n == 0 {
                    break;
                }
                if let Err(e) = stream.write_all(&buf[..n]) {
                    return classify(e, "upload");
                }
                offset += n as u64;
            }
            if let Err(e) = stream.shutdown(Shutdown::Write) {
                return classify(e, "half-close");
            }
            let mut reply = String::new();
            match stream.read_to_string(&mut reply) {
                Ok(_) => {
                    let want = format!("{} {expected}\n", t.size);
                    if reply == want {
                        Outcome::Ok
                    } else if reply.is_empty() {
                        // The server's answer never came but the connection ended cleanly:
                        // the path lost the server's bytes.
                        Outcome::Wrong("clean end without the server's answer".into())
                    } else {
                        Outcome::Wrong(format!(
                            "server saw {:?}, expected {:?}",
                            reply.trim(),
                            want.trim()
                        ))
                    }
                }
                Err(e) => classify(e, "answer"),
            }
        }
    }
}

/// Runs `plan` against `to` with `concurrency` transfers in flight; `progress` is called after
/// each transfer with the number done so far.
pub fn run_plan(
    to: SocketAddr,
    plan: &[Transfer],
    concurrency: usize,
    io_timeout: Duration,
    progress: &(dyn Fn(usize, &Outcome) + Sync),
) -> XferReport {
    let started = SystemClock::now();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    let digests = Digests::default();
    std::thread::scope(|s| {
        for _ in 0..concurrency.max(1).min(plan.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(t) = plan.get(i) else { break };
                let o = run_one_with(to, t, io_timeout, &digests);
                let d = done.fetch_add(1, Ordering::SeqCst) + 1;
                progress(d, &o);
                if let Ok(mut r) = results.lock() {
                    r.push((i, o));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|(i, _)| *i);
    let mut report = XferReport {
        transfers: results.len(),
        seconds: (SystemClock::now() - started).as_secs_f64(),
        ..XferReport::default()
    };
    for (i, o) in &results {
        match o {
            Outcome::Ok => {
                report.ok += 1;
                report.bytes_ok += plan[*i].size;
            }
            Outcome::Reset(_) => report.reset += 1,
            Outcome::Stalled(_) => report.stalled += 1,
            Outcome::Wrong(_) => report.wrong += 1,
        }
        if *o != Outcome::Ok && report.failures.len() < 10 {
            report.failures.push(format!("{i} {:?}: {o:?}", plan[*i]));
        }
    }
    report
}

/// `xfer-server`.
pub fn run_server(a: XferServerArgs) -> Result<()> {
    let listener =
        TcpListener::bind(a.listen).with_context(|| format!("binding TCP {}", a.listen))?;
    println!("ready");
    std::io::stdout().flush()?;
    serve(listener)
}

/// `xfer`: prints `progress DONE TOTAL` lines and the report as `result {json}` (with
/// `--stream`: only the [`StreamReport`]).
pub fn run_client(a: XferArgs) -> Result<()> {
    if let Some(way) = a.stream {
        let report = stream(a.to, way, a.seed, a.duration, a.io_timeout)?;
        println!("result {}", serde_json::to_string(&report)?);
        return Ok(());
    }
    let plan = plan(a.transfers, a.max_size, a.seed);
    let total = plan.len();
    let report = run_plan(a.to, &plan, a.concurrency, a.io_timeout, &|d, _| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "progress {d} {total}");
        let _ = out.flush();
    });
    println!("result {}", serde_json::to_string(&report)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_deterministic_and_cover_the_edges() {
        let p = plan(200, 100_000_000, 7);
        assert_eq!(p, plan(200, 100_000_000, 7));
        assert_eq!((p[0].size, p[1].size, p[2].size), (0, 1, 100_000_000));
        assert!(p.iter().all(|t| t.size <= 100_000_000));
        assert!(p.iter().any(|t| t.way == Way::Up) && p.iter().any(|t| t.way == Way::Down));
        let mut seen = std::collections::HashSet::new();
        assert!(
            p.iter().any(|t| !seen.insert((t.kind, t.seed))),
            "documents repeat"
        );
    }

    #[test]
    fn headers_round_trip_and_garbage_is_refused() {
        for t in plan(20, 5000, 3) {
            let h = t.header();
            assert_eq!(parse_header(h.trim_end()).unwrap(), t);
        }
        for bad in [
            "",
            "HWX1",
            "HWX2 up doc 1 1",
            "HWX1 sideways doc 1 1",
            "HWX1 up gif 1 1",
            "HWX1 up doc -1 1",
        ] {
            assert!(parse_header(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_real_server_verifies_both_ways_over_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(listener));
        let p = plan(30, 3_000_000, 11);
        let report = run_plan(addr, &p, 8, Duration::from_secs(30), &|_, _| {});
        assert_eq!(report.ok, 30, "{report:?}");
        assert_eq!(report.wrong, 0);
    }

    #[test]
    fn bulk_streams_verify_both_ways_over_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(listener));
        let t = Duration::from_secs(10);
        for way in [Way::Up, Way::Down] {
            let r = stream(addr, way, 5, Duration::from_millis(200), t).unwrap();
            assert!(r.ok, "{way:?}: {r:?}");
            assert!(r.bytes > 0 && r.bps() > 0.0, "{way:?}: {r:?}");
        }
    }

    #[test]
    fn a_wrong_byte_in_a_bulk_stream_is_reported() {
        // A "server" that sends the right stream with one byte flipped.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut line = [0u8; 64];
            let _ = s.read(&mut line);
            let mut v = vec![0u8; 100_000];
            Document::new(Kind::Random, STREAM_SIZE, 9).fill(0, &mut v);
            v[77_777] ^= 1;
            let _ = s.write_all(&v);
            std::thread::sleep(Duration::from_secs(2));
        });
        let r = stream(
            addr,
            Way::Down,
            9,
            Duration::from_secs(5),
            Duration::from_secs(5),
        );
        let r = r.unwrap();
        assert!(!r.ok);
        assert!(r.detail.contains("77777"), "{r:?}");
    }

    #[test]
    fn directions_parse() {
        assert_eq!(parse_way("up"), Ok(Way::Up));
        assert_eq!(parse_way("down"), Ok(Way::Down));
        assert!(parse_way("sideways").is_err());
    }

    #[test]
    fn a_truncating_path_is_wrong_not_ok() {
        // A "server" that answers a download with a short body and a clean FIN.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming().flatten().take(2) {
                let mut s = s;
                let mut line = [0u8; 64];
                let _ = s.read(&mut line);
                let _ = s.write_all(b"short");
                let _ = s.shutdown(Shutdown::Write);
            }
        });
        let t = Transfer {
            way: Way::Down,
            kind: Kind::Doc,
            size: 1000,
            seed: 1,
        };
        assert!(matches!(
            run_one(addr, &t, Duration::from_secs(5)),
            Outcome::Wrong(_)
        ));
        let up = Transfer { way: Way::Up, ..t };
        assert!(matches!(
            run_one(addr, &up, Duration::from_secs(5)),
            Outcome::Wrong(_) | Outcome::Reset(_)
        ));
    }
}
