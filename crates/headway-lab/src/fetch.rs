//! `headway lab tool fetch`: download one URL path over HTTP/1.1 inside a lab namespace and
//! report how long it took, with progress lines the parent process can follow.
//!
//! Output protocol on stdout (one line each): `progress BYTES TOTAL` about four times a second
//! while the body arrives (TOTAL is 0 when the server sent no Content-Length), then one
//! `result {json}` line with a [`FetchReport`]. The parent (the demo, benchmarks) reads these
//! through [`crate::Background::wait_line`].
//!
//! Timing starts when the TCP connection is attempted (after the server became reachable: the
//! tool first retries refused connections until `--ready-timeout`, so starting the origin and
//! the fetch at the same time is safe) and ends when the last body byte arrived.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use headway_core::SystemClock;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `fetch` arguments.
#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// The server.
    #[arg(long)]
    pub to: SocketAddr,
    /// The URL path, e.g. `/files/pdf_small`.
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Keep retrying a refused connection this long before giving up.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub ready_timeout: Duration,
}

/// What one download measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchReport {
    /// HTTP status code.
    pub status: u16,
    /// Body bytes received.
    pub bytes: u64,
    /// Seconds from connect to the end of the response headers.
    pub header_seconds: f64,
    /// Seconds from connect to the last body byte.
    pub total_seconds: f64,
    /// Lower-case hex SHA-256 of the body.
    pub sha256: String,
}

impl FetchReport {
    /// Body goodput in bits per second.
    pub fn goodput_bps(&self) -> f64 {
        if self.total_seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.total_seconds
        } else {
            0.0
        }
    }
}

/// Runs the tool: connects (retrying while refused), downloads, prints progress and the result.
pub fn run(args: FetchArgs) -> Result<()> {
    let deadline = SystemClock::now() + args.ready_timeout;
    let stream = loop {
        match TcpStream::connect_timeout(&args.to, Duration::from_secs(5)) {
            Ok(s) => break s,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && SystemClock::now() < deadline =>
            {
                // The server is still starting: poll again shortly.
                std::thread::park_timeout(Duration::from_millis(20));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot connect to {}", args.to)),
        }
    };
    let report = download(
        stream,
        &args.to.to_string(),
        &args.path,
        &mut std::io::stdout(),
    )?;
    println!("result {}", serde_json::to_string(&report)?);
    Ok(())
}

/// Sends `GET path` on `stream` and reads the whole response, writing progress lines to `out`.
pub fn download(
    stream: TcpStream,
    host: &str,
    path: &str,
    out: &mut dyn Write,
) -> Result<FetchReport> {
    let start = SystemClock::now();
    stream.set_nodelay(true).ok();
    let mut writer = stream.try_clone().context("cloning the socket")?;
    // One write: `write!` on an unbuffered socket with TCP_NODELAY sends every formatted
    // piece as its own segment, and a server that answers after the first one may close
    // before the rest arrives (a reset, then EPIPE here).
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: headway-lab\r\nConnection: close\r\n\r\n"
    );
    writer
        .write_all(request.as_bytes())
        .context("sending the request")?;
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .context("reading the status line")?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("malformed status line {line:?}"))?;
    let mut length: Option<u64> = None;
    loop {
        line.clear();
        if reader.read_line(&mut line).context("reading headers")? == 0 {
            bail!("connection closed inside the response headers");
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = Some(v.trim().parse().context("bad Content-Length")?);
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                bail!("chunked responses are not supported by this tool");
            }
        }
    }
    let header_seconds = (SystemClock::now() - start).as_secs_f64();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut bytes = 0u64;
    let mut next_progress = SystemClock::now();
    loop {
        if length.is_some_and(|n| bytes >= n) {
            break;
        }
        let n = reader.read(&mut buf).context("reading the body")?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
        let now = SystemClock::now();
        if now >= next_progress {
            writeln!(out, "progress {bytes} {}", length.unwrap_or(0))?;
            out.flush()?;
            next_progress = now + Duration::from_millis(250);
        }
    }
    let total_seconds = (SystemClock::now() - start).as_secs_f64();
    if let Some(n) = length {
        if bytes != n {
            bail!("connection closed after {bytes} of {n} body bytes");
        }
    }
    writeln!(out, "progress {bytes} {}", length.unwrap_or(bytes))?;
    Ok(FetchReport {
        status,
        bytes,
        header_seconds,
        total_seconds,
        sha256: hex(&hasher.finalize()),
    })
}

/// Runs this tool in the lab's client host against `to` (`ADDR:PORT`) and `path`, with a
/// progress bar labelled `label` (hidden when stdout is not a terminal). `Ok(None)` when the
/// download did not finish within `timeout` (the tool is then stopped).
pub fn fetch_in_lab(
    lab: &crate::Lab,
    exe: &str,
    to: &str,
    path: &str,
    label: &str,
    timeout: Duration,
) -> Result<Option<FetchReport>> {
    let mut child = lab.spawn(
        "client",
        &[exe, "lab", "tool", "fetch", "--to", to, "--path", path],
    )?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "  {msg:<28} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {elapsed}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    let started = SystemClock::now();
    let line = child.wait_line(timeout, |l| {
        if let Some(rest) = l.strip_prefix("progress ") {
            let mut it = rest
                .split_whitespace()
                .filter_map(|x| x.parse::<u64>().ok());
            if let (Some(done), Some(total)) = (it.next(), it.next()) {
                bar.set_length(total);
                bar.set_position(done);
            }
        }
        l.starts_with("result ")
    });
    let line = match line {
        Ok(line) => line,
        Err(_) if SystemClock::now() - started >= timeout => {
            bar.abandon_with_message(format!("{label}: over {timeout:?}"));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    bar.finish();
    let report: FetchReport = serde_json::from_str(line.trim_start_matches("result "))
        .with_context(|| format!("unreadable fetch result {line:?}"))?;
    Ok(Some(report))
}

/// [`fetch_in_lab`] of a corpus document, checked: status 200, `doc.size()` bytes and
/// `doc.sha256()`, or an error naming `label`. `Ok(None)` on timeout, as `fetch_in_lab`.
pub fn fetch_document(
    lab: &crate::Lab,
    exe: &str,
    to: &str,
    path: &str,
    doc: &headway_origin::Document,
    label: &str,
    timeout: Duration,
) -> Result<Option<FetchReport>> {
    let Some(r) = fetch_in_lab(lab, exe, to, path, label, timeout)? else {
        return Ok(None);
    };
    let expected = hex(&doc.sha256());
    if r.status != 200 || r.bytes != doc.size() || r.sha256 != expected {
        bail!(
            "{label}: download corrupted: status {}, {} of {} bytes, sha256 {} (expected {expected})",
            r.status,
            r.bytes,
            doc.size(),
            r.sha256
        );
    }
    Ok(Some(r))
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn downloads_and_hashes_a_body_from_a_real_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req).unwrap();
            let body = vec![7u8; 100_000];
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .unwrap();
            s.write_all(&body).unwrap();
        });
        let stream = TcpStream::connect(addr).unwrap();
        let mut out = Vec::new();
        let r = download(stream, "x", "/", &mut out).unwrap();
        server.join().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.bytes, 100_000);
        assert_eq!(r.sha256, hex(&Sha256::digest(vec![7u8; 100_000])));
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines().last().unwrap() == "progress 100000 100000",
            "{text}"
        );
    }

    #[test]
    fn a_short_body_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req).unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                .unwrap();
        });
        let r = download(TcpStream::connect(addr).unwrap(), "x", "/", &mut Vec::new());
        server.join().unwrap();
        assert!(r.unwrap_err().to_string().contains("after 3 of 10"));
    }
}
