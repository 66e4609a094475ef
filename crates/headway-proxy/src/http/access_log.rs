//! The access log: one line per request, in the combined log format or as JSON, written by a
//! thread of its own so that a slow disk never stalls the data path.
//!
//! [`Logger::write`] hands an [`Entry`] to a bounded channel and returns at once; when the
//! channel is full (the disk is far behind) the line is dropped and counted
//! ([`Logger::dropped`]), never waited for. The writer thread buffers, and flushes whenever
//! the channel runs empty, so lines appear within milliseconds at low load and in large writes
//! at high load. Dropping the last [`Logger`] flushes and ends the thread.

use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, SystemTime};

use headway_config::adc::AccessLogFormat;
use serde::Serialize;

/// Lines buffered between the data path and the writer.
const QUEUE: usize = 16 * 1024;

/// One request's log fields.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Entry {
    /// When the request arrived (wall clock).
    #[serde(skip)]
    pub time: Option<SystemTime>,
    /// The client's address.
    pub client: Option<IpAddr>,
    /// The virtual server.
    pub virtual_server: String,
    /// The method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// `HTTP/1.1`, `HTTP/2.0`, …
    pub version: String,
    /// The `Host` (or `:authority`).
    pub host: String,
    /// The status sent.
    pub status: u16,
    /// Response body bytes sent.
    pub bytes: u64,
    /// `Referer`.
    pub referer: String,
    /// `User-Agent`.
    pub user_agent: String,
    /// The server group.
    pub group: String,
    /// The server, if one was reached.
    pub server: String,
    /// Time from request to the end of the response.
    #[serde(skip)]
    pub duration: Duration,
    /// Whether the response body was sent to its end.
    pub complete: bool,
    /// The request's ID (`request_id`), or empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// A gRPC call's status (`grpc-status`, from the answer's trailers or its head), JSON only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<u16>,
}

/// The `grpc-status` in `fields`, if there is one and it is a number.
pub fn grpc_status(fields: &http::HeaderMap) -> Option<u16> {
    fields.get("grpc-status")?.to_str().ok()?.parse().ok()
}

impl Entry {
    /// The line in `format`, with its newline.
    pub fn render(&self, format: AccessLogFormat) -> String {
        let time = time::OffsetDateTime::from(self.time.unwrap_or(SystemTime::UNIX_EPOCH));
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        match format {
            AccessLogFormat::Combined => {
                // %h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i"
                let t = time
                    .format(time::macros::format_description!(
                        "[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000"
                    ))
                    .unwrap_or_default();
                let id = if self.request_id.is_empty() {
                    String::new()
                } else {
                    format!(" \"{}\"", quote_safe(&self.request_id))
                };
                format!(
                    "{} - - [{t}] \"{} {} {}\" {} {} \"{}\" \"{}\"{id}\n",
                    self.client.map_or("-".to_string(), |c| c.to_string()),
                    quote_safe(&self.method),
                    quote_safe(&self.uri),
                    self.version,
                    self.status,
                    if self.bytes == 0 {
                        "-".to_string()
                    } else {
                        self.bytes.to_string()
                    },
                    quote_safe(&dash(&self.referer)),
                    quote_safe(&dash(&self.user_agent)),
                )
            }
            _ => {
                #[derive(Serialize)]
                struct Line<'a> {
                    time: String,
                    #[serde(flatten)]
                    entry: &'a Entry,
                    duration_ms: f64,
                }
                let line = Line {
                    time: time
                        .format(&time::format_description::well_known::Rfc3339)
                        .unwrap_or_default(),
                    entry: self,
                    duration_ms: self.duration.as_secs_f64() * 1e3,
                };
                let mut s = serde_json::to_string(&line).unwrap_or_default();
                s.push('\n');
                s
            }
        }
    }
}

/// Escapes `"` and `\` and control bytes, as NGINX does, so a line always parses.
fn quote_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\x{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Why the log could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The file could not be opened for appending.
    #[error("cannot open the access log {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The handle the data path writes through.
#[derive(Debug)]
pub struct Logger {
    tx: SyncSender<String>,
    format: AccessLogFormat,
    dropped: AtomicU64,
    target: Option<PathBuf>,
}

impl Logger {
    /// Opens `path` for appending (`None`: standard output) and starts the writer thread.
    pub fn open(path: Option<&Path>, format: AccessLogFormat) -> Result<Logger, LogError> {
        let out: Box<dyn Write + Send> = match path {
            None => Box::new(std::io::stdout()),
            Some(p) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|source| LogError::Open {
                        path: p.to_path_buf(),
                        source,
                    })?,
            ),
        };
        let (tx, rx) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || writer(rx, out))
            .map_err(|source| LogError::Open {
                path: path.map(Path::to_path_buf).unwrap_or_default(),
                source,
            })?;
        Ok(Logger {
            tx,
            format,
            dropped: AtomicU64::new(0),
            target: path.map(Path::to_path_buf),
        })
    }

    /// Whether this logger writes `path` in `format` (so a reload can keep it).
    pub fn is(&self, path: Option<&Path>, format: AccessLogFormat) -> bool {
        self.target.as_deref() == path && self.format == format
    }

    /// Queues one line; drops it (counted) if the writer is far behind.
    pub fn write(&self, entry: Entry) {
        if self.tx.try_send(entry.render(self.format)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lines dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

fn writer(rx: Receiver<String>, out: Box<dyn Write + Send>) {
    let mut out = BufWriter::with_capacity(64 * 1024, out);
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let _ = out.write_all(line.as_bytes());
                // Drain what is queued, then flush once.
                while let Ok(line) = rx.try_recv() {
                    let _ = out.write_all(line.as_bytes());
                }
                let _ = out.flush();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                let _ = out.flush();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            time: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            client: Some("10.0.0.7".parse().unwrap()),
            virtual_server: "web".into(),
            method: "GET".into(),
            uri: "/a?b=\"c\"".into(),
            version: "HTTP/1.1".into(),
            host: "example".into(),
            status: 200,
            bytes: 512,
            referer: String::new(),
            user_agent: "curl/8".into(),
            group: "g".into(),
            server: "s1".into(),
            duration: Duration::from_micros(1500),
            complete: true,
            request_id: String::new(),
            grpc_status: None,
        }
    }

    #[test]
    fn combined_format_is_the_apache_one() {
        assert_eq!(
            entry().render(AccessLogFormat::Combined),
            "10.0.0.7 - - [14/Nov/2023:22:13:20 +0000] \"GET /a?b=\\\"c\\\" HTTP/1.1\" 200 512 \"-\" \"curl/8\"\n"
        );
    }

    #[test]
    fn json_lines_parse_back() {
        let line = entry().render(AccessLogFormat::Json);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["server"], "s1");
        assert_eq!(v["time"], "2023-11-14T22:13:20Z");
        assert_eq!(v["duration_ms"], 1.5);
        assert!(v.get("request_id").is_none(), "{line}");
    }

    #[test]
    fn a_request_id_ends_the_combined_line_and_is_a_json_field() {
        let e = Entry {
            request_id: "0af3\"x".into(),
            ..entry()
        };
        let line = e.render(AccessLogFormat::Combined);
        assert!(line.ends_with("\"curl/8\" \"0af3\\\"x\"\n"), "{line}");
        let v: serde_json::Value = serde_json::from_str(&e.render(AccessLogFormat::Json)).unwrap();
        assert_eq!(v["request_id"], "0af3\"x");
    }

    #[test]
    fn lines_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = Logger::open(Some(&path), AccessLogFormat::Json).unwrap();
        log.write(entry());
        log.write(entry());
        drop(log);
        // The writer thread flushes when the channel closes; wait for it (bounded).
        let deadline = headway_core::SystemClock::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.lines().count() == 2 || headway_core::SystemClock::now() > deadline {
                assert_eq!(text.lines().count(), 2, "{text}");
                break;
            }
            std::thread::yield_now();
        }
    }
}
