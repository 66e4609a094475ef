//! `headway lab tool page`: download a web page the way a browser does — the HTML first, then
//! its objects over a few parallel keep-alive connections — and report how long the whole page
//! took.
//!
//! The page is given on the command line (`--html PATH --objects PATH,PATH,…`); the HTML is
//! fetched on the first connection, then the objects are shared out over `--parallel`
//! connections (the first one reused, the others opened when the HTML has arrived, as a
//! browser opens them once it knows what to fetch), each taking the next object in turn until
//! none is left. Every response must be 200 with a body framed by `Content-Length` or chunked
//! encoding; anything else is an error naming the object.
//!
//! Output protocol: one line `result {json}` ([`PageReport`]). Timing starts when the first
//! connection is attempted and ends when the last body byte arrived.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::SystemClock;
use serde::{Deserialize, Serialize};

/// `page` arguments.
#[derive(Debug, clap::Args)]
pub struct PageArgs {
    /// The server.
    #[arg(long)]
    pub to: SocketAddr,
    /// The HTML's path.
    #[arg(long)]
    pub html: String,
    /// The objects' paths, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub objects: Vec<String>,
    /// Connections at once, the browser's per-host limit.
    #[arg(long, default_value_t = 6)]
    pub parallel: usize,
    /// Give up on any one read after this long.
    #[arg(long, default_value = "120s", value_parser = headway_core::units::parse_duration)]
    pub read_timeout: Duration,
}

/// What one page download measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageReport {
    /// Seconds from the first connect to the last byte of the last object.
    pub total_seconds: f64,
    /// Seconds from the first connect to the HTML's last byte.
    pub html_seconds: f64,
    /// Body bytes of the HTML and every object.
    pub bytes: u64,
    /// Objects fetched besides the HTML.
    pub objects: usize,
    /// Connections used.
    pub connections: usize,
}

/// Runs the tool.
pub fn run(args: PageArgs) -> Result<()> {
    let report = download(&args)?;
    println!("result {}", serde_json::to_string(&report)?);
    Ok(())
}

/// Downloads the page; see the module docs.
pub fn download(args: &PageArgs) -> Result<PageReport> {
    let start = SystemClock::now();
    let host = args.to.to_string();
    let connect = || -> Result<Conn> {
        let s = TcpStream::connect_timeout(&args.to, Duration::from_secs(10))
            .with_context(|| format!("cannot connect to {}", args.to))?;
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(args.read_timeout)).ok();
        Conn::new(s)
    };
    let mut first = connect()?;
    let mut bytes = first.get(&host, &args.html)?;
    let html_seconds = start.elapsed_since_start();
    let parallel = args.parallel.clamp(1, 64).min(args.objects.len().max(1));
    let next = AtomicUsize::new(0);
    let total = Mutex::new(0u64);
    let first = Mutex::new(Some(first));
    std::thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..parallel)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    let reused = first
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?
                        .take();
                    let mut conn = match reused {
                        Some(c) => c,
                        None => connect()?,
                    };
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = args.objects.get(i) else {
                            return Ok(());
                        };
                        let n = conn.get(&host, path)?;
                        *total.lock().map_err(|_| anyhow::anyhow!("poisoned"))? += n;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a page worker panicked"))??;
        }
        Ok(())
    })?;
    bytes += *total.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    Ok(PageReport {
        total_seconds: start.elapsed_since_start(),
        html_seconds,
        bytes,
        objects: args.objects.len(),
        connections: parallel,
    })
}

/// Seconds since an instant of the sanctioned clock.
trait SinceStart {
    fn elapsed_since_start(&self) -> f64;
}

impl SinceStart for std::time::Instant {
    fn elapsed_since_start(&self) -> f64 {
        SystemClock::now().duration_since(*self).as_secs_f64()
    }
}

/// A keep-alive HTTP/1.1 connection.
struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn new(s: TcpStream) -> Result<Conn> {
        Ok(Conn {
            writer: s.try_clone().context("cloning the socket")?,
            reader: BufReader::with_capacity(64 * 1024, s),
        })
    }

    /// GETs `path` and reads the whole response; returns the body's length.
    fn get(&mut self, host: &str, path: &str) -> Result<u64> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: headway-lab\r\n\r\n");
        self.writer
            .write_all(req.as_bytes())
            .with_context(|| format!("sending GET {path}"))?;
        read_response(&mut self.reader).with_context(|| format!("GET {path}"))
    }
}

/// Reads one response (status 200 required) and returns its body's length.
pub fn read_response(r: &mut impl BufRead) -> Result<u64> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        bail!("connection closed before the response");
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("malformed status line {line:?}"))?;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("connection closed inside the response headers");
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = Some(v.trim().parse().context("bad Content-Length")?);
            } else if k.eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    if status != 200 {
        bail!("status {status}");
    }
    if chunked {
        let mut total = 0u64;
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = u64::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("bad chunk size {line:?}"))?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    line.clear();
                    if r.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        return Ok(total);
                    }
                }
            }
            skip(r, size)?;
            total += size;
            line.clear();
            r.read_line(&mut line)?;
        }
    }
    let n = length.context("a response without Content-Length or chunked encoding")?;
    skip(r, n)?;
    Ok(n)
}

/// Reads and drops exactly `n` bytes.
fn skip(r: &mut impl Read, n: u64) -> Result<()> {
    let copied = std::io::copy(&mut r.take(n), &mut std::io::sink())?;
    if copied != n {
        bail!("connection closed after {copied} of {n} body bytes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn length_and_chunked_bodies_are_read_to_their_end() {
        let text = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
                    HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\n\
                    HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        let mut r = BufReader::new(text.as_bytes());
        assert_eq!(read_response(&mut r).unwrap(), 5);
        assert_eq!(read_response(&mut r).unwrap(), 7);
        assert!(read_response(&mut r)
            .unwrap_err()
            .to_string()
            .contains("404"));
        let mut short = BufReader::new(&b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc"[..]);
        assert!(read_response(&mut short)
            .unwrap_err()
            .to_string()
            .contains("after 3 of 9"));
    }

    #[test]
    fn a_page_is_fetched_over_parallel_keep_alive_connections() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let a = accepted.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                a.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut w = s;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                        while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                            line.clear();
                        }
                        let body = vec![b'x'; path.len() * 100];
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        if w.write_all(head.as_bytes())
                            .and_then(|_| w.write_all(&body))
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        let args = PageArgs {
            to,
            html: "/index.html".into(),
            objects: (0..10).map(|i| format!("/o{i}")).collect(),
            parallel: 3,
            read_timeout: Duration::from_secs(10),
        };
        let r = download(&args).unwrap();
        assert_eq!(r.bytes, 1100 + 10 * 300);
        assert_eq!((r.objects, r.connections), (10, 3));
        assert!(r.total_seconds >= r.html_seconds);
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }
}
