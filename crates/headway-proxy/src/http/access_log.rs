//! The access log: one line per request, in the combined log format or as JSON, written by a
//! thread of its own so that a slow disk never stalls the data path.
//!
//! [`Logger::write`] hands an [`Entry`] to a bounded channel and returns at once; when the
//! channel is full (the disk is far behind) the line is dropped and counted
//! ([`Logger::dropped`]), never waited for. The writer thread buffers, and flushes whenever
//! the channel runs empty, so lines appear within milliseconds at low load and in large writes
//! at high load. Dropping the last [`Logger`] flushes and ends the thread.
//!
//! # Rotation
//!
//! A log file is rotated by moving it aside (logrotate's default, `mv access.log
//! access.log.1`) or deleting it. Every [`ROTATION_CHECK`] the writer compares the file it
//! writes with what the path names now (device and inode); when the path names another file
//! or none, it flushes what it holds into the old file and opens the path again (creating
//! it), so a rotation needs no `postrotate` signal and no line is lost or written to the
//! moved file after the check. [`Logger::reopen`] (`SIGUSR1`, as NGINX does) reopens at once.
//! A path that cannot be opened again (its directory gone, no permission) keeps the old file,
//! with one warning per failure streak and another try at the next check. Writes the disk
//! refuses (full, an I/O error) are counted ([`Logger::write_errors`]) and warned of once per
//! failure streak.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use headway_config::adc::AccessLogFormat;
use serde::Serialize;

/// How often the writer checks whether its file was moved or deleted (see the module doc).
pub const ROTATION_CHECK: Duration = Duration::from_secs(1);
/// The writer's longest wait for a line: how late an asked reopen may come at the most.
const POLL: Duration = Duration::from_millis(200);

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
    target: Option<PathBuf>,
    state: Arc<LogState>,
}

/// What the data path, the writer thread and the operator share.
#[derive(Debug, Default)]
struct LogState {
    /// Lines dropped because the queue was full.
    dropped: AtomicU64,
    /// Writes and flushes the file refused (a full disk, an I/O error).
    write_errors: AtomicU64,
    /// The last write failed (one warning per failure streak).
    failing: AtomicBool,
    /// Times the file was opened again (rotated, deleted, or asked).
    reopened: AtomicU64,
    /// [`Logger::reopen`] was called and the writer has not done it yet.
    reopen_asked: AtomicBool,
}

impl Logger {
    /// Opens `path` for appending (`None`: standard output) and starts the writer thread.
    pub fn open(path: Option<&Path>, format: AccessLogFormat) -> Result<Logger, LogError> {
        let sink = match path {
            None => Sink::Stdout(BufWriter::with_capacity(64 * 1024, std::io::stdout())),
            Some(p) => Sink::File(LogFile::open(p).map_err(|source| LogError::Open {
                path: p.to_path_buf(),
                source,
            })?),
        };
        let state = Arc::new(LogState::default());
        let (tx, rx) = sync_channel(QUEUE);
        let shared = state.clone();
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || writer(rx, sink, &shared))
            .map_err(|source| LogError::Open {
                path: path.map(Path::to_path_buf).unwrap_or_default(),
                source,
            })?;
        Ok(Logger {
            tx,
            format,
            target: path.map(Path::to_path_buf),
            state,
        })
    }

    /// Whether this logger writes `path` in `format` (so a reload can keep it).
    pub fn is(&self, path: Option<&Path>, format: AccessLogFormat) -> bool {
        self.target.as_deref() == path && self.format == format
    }

    /// The file written (`None`: standard output).
    pub fn path(&self) -> Option<&Path> {
        self.target.as_deref()
    }

    /// Queues one line; drops it (counted) if the writer is far behind.
    pub fn write(&self, entry: Entry) {
        if self.tx.try_send(entry.render(self.format)).is_err() {
            self.state.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks the writer to open the file again (after its queued lines went to the old one),
    /// within 200 ms; nothing for standard output.
    pub fn reopen(&self) {
        self.state.reopen_asked.store(true, Ordering::Relaxed);
    }

    /// Lines dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.state.dropped.load(Ordering::Relaxed)
    }

    /// Writes and flushes of the file that failed (a full disk, an I/O error).
    pub fn write_errors(&self) -> u64 {
        self.state.write_errors.load(Ordering::Relaxed)
    }

    /// Times the file was opened again since the logger started.
    pub fn reopened(&self) -> u64 {
        self.state.reopened.load(Ordering::Relaxed)
    }

    /// What the snapshot shows of this log.
    pub fn snapshot(&self) -> crate::stats::AccessLogSnapshot {
        crate::stats::AccessLogSnapshot {
            path: self
                .target
                .as_deref()
                .map_or_else(|| "-".into(), |p| p.display().to_string()),
            format: match self.format {
                AccessLogFormat::Combined => "combined",
                AccessLogFormat::Json => "json",
            }
            .into(),
            dropped: self.dropped(),
            write_errors: self.write_errors(),
            reopened: self.reopened(),
        }
    }
}

/// Where the writer writes.
enum Sink {
    Stdout(BufWriter<std::io::Stdout>),
    File(LogFile),
}

/// An open log file and what identifies it on disk.
struct LogFile {
    path: PathBuf,
    out: BufWriter<File>,
    /// Device and inode of the open file.
    id: (u64, u64),
    last_check: Instant,
    /// A reopen failed and has not succeeded since (one warning per streak).
    failing: bool,
}

impl LogFile {
    fn open(path: &Path) -> std::io::Result<LogFile> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let m = file.metadata()?;
        Ok(LogFile {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(64 * 1024, file),
            id: (m.dev(), m.ino()),
            last_check: headway_core::SystemClock::now(),
            failing: false,
        })
    }

    /// Why the file should be opened again, if it should: the path names another file, or
    /// none (see the module doc).
    fn moved(&self) -> Option<&'static str> {
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) != self.id => Some("the path names another file"),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some("the file was moved or deleted")
            }
            // Unreadable for now (a permission change): keep writing where we are.
            Err(_) => None,
        }
    }

    /// Checks for a rotation when one is due or `asked`, and opens the path again if so.
    /// Returns whether it did.
    fn follow(&mut self, asked: bool) -> bool {
        if !asked
            && headway_core::SystemClock::now().saturating_duration_since(self.last_check)
                < ROTATION_CHECK
        {
            return false;
        }
        self.last_check = headway_core::SystemClock::now();
        let why = if asked {
            "asked"
        } else {
            match self.moved() {
                Some(why) => why,
                None => return false,
            }
        };
        // What is buffered belongs to the file it was written for.
        let _ = self.out.flush();
        match LogFile::open(&self.path) {
            Ok(next) => {
                tracing::info!(path = %self.path.display(), reason = why, "access log reopened");
                *self = next;
                true
            }
            Err(e) => {
                if !self.failing {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot reopen the access log; writing to the file already open");
                }
                self.failing = true;
                false
            }
        }
    }
}

impl Sink {
    fn write_all(&mut self, line: &str, state: &LogState) {
        let r = match self {
            Sink::Stdout(out) => out.write_all(line.as_bytes()),
            Sink::File(f) => f.out.write_all(line.as_bytes()),
        };
        state.outcome(r);
    }

    fn flush(&mut self, state: &LogState) {
        let r = match self {
            Sink::Stdout(out) => out.flush(),
            Sink::File(f) => f.out.flush(),
        };
        state.outcome(r);
    }

    /// Follows a rotation (files only; see [`LogFile::follow`]).
    fn follow(&mut self, state: &LogState) {
        let asked = state.reopen_asked.swap(false, Ordering::Relaxed);
        if let Sink::File(f) = self {
            if f.follow(asked) {
                state.reopened.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl LogState {
    /// Counts a failed write or flush, warning once per failure streak.
    fn outcome(&self, r: std::io::Result<()>) {
        match r {
            Ok(()) => self.failing.store(false, Ordering::Relaxed),
            Err(e) => {
                self.write_errors.fetch_add(1, Ordering::Relaxed);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "the access log cannot be written");
                }
            }
        }
    }
}

fn writer(rx: Receiver<String>, mut sink: Sink, state: &LogState) {
    loop {
        match rx.recv_timeout(POLL) {
            Ok(line) => {
                sink.write_all(&line, state);
                // Drain what is queued, then flush once.
                while let Ok(line) = rx.try_recv() {
                    sink.write_all(&line, state);
                }
                sink.flush(state);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                sink.flush(state);
                return;
            }
        }
        sink.follow(state);
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

    /// Waits (bounded) until `path` holds `n` lines, and returns them.
    fn lines_in(path: &Path, n: usize) -> Vec<String> {
        let deadline = headway_core::SystemClock::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.len() >= n || headway_core::SystemClock::now() > deadline {
                assert_eq!(lines.len(), n, "{}: {text}", path.display());
                return lines;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (bounded) until the writer made `path` again.
    fn made_again(path: &Path) {
        let deadline = headway_core::SystemClock::now() + Duration::from_secs(10);
        while !path.exists() {
            assert!(
                headway_core::SystemClock::now() < deadline,
                "{} never made again",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn numbered(i: u32) -> Entry {
        Entry {
            uri: format!("/{i}"),
            ..entry()
        }
    }

    #[test]
    fn lines_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = Logger::open(Some(&path), AccessLogFormat::Json).unwrap();
        log.write(entry());
        log.write(entry());
        drop(log);
        // The writer thread flushes when the channel closes.
        lines_in(&path, 2);
    }

    #[test]
    fn a_moved_file_is_followed_by_a_new_one_at_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let moved = dir.path().join("access.log.1");
        let log = Logger::open(Some(&path), AccessLogFormat::Combined).unwrap();
        for i in 0..3 {
            log.write(numbered(i));
        }
        lines_in(&path, 3);
        // logrotate's default: move the file aside, no signal.
        std::fs::rename(&path, &moved).unwrap();
        made_again(&path);
        for i in 3..5 {
            log.write(numbered(i));
        }
        let new = lines_in(&path, 2);
        assert!(
            new[0].contains("GET /3 ") && new[1].contains("GET /4 "),
            "{new:?}"
        );
        let old = lines_in(&moved, 3);
        assert!(old[2].contains("GET /2 "), "{old:?}");
        assert_eq!(
            (log.reopened(), log.dropped(), log.write_errors()),
            (1, 0, 0)
        );
    }

    #[test]
    fn a_deleted_file_is_made_again_and_a_reopen_can_be_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = Logger::open(Some(&path), AccessLogFormat::Json).unwrap();
        log.write(numbered(0));
        lines_in(&path, 1);
        std::fs::remove_file(&path).unwrap();
        made_again(&path);
        log.write(numbered(1));
        assert!(lines_in(&path, 1)[0].contains("\"uri\":\"/1\""));
        // Asked (SIGUSR1): the same path opened again at once, appending.
        log.reopen();
        let deadline = headway_core::SystemClock::now() + Duration::from_secs(10);
        while log.reopened() < 2 {
            assert!(
                headway_core::SystemClock::now() < deadline,
                "reopen never done"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        log.write(numbered(2));
        lines_in(&path, 2);
    }

    #[test]
    fn a_path_that_cannot_be_opened_again_keeps_the_open_file() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let path = logs.join("access.log");
        let log = Logger::open(Some(&path), AccessLogFormat::Json).unwrap();
        log.write(numbered(0));
        lines_in(&path, 1);
        // The whole directory moved: the path cannot be made again.
        let gone = dir.path().join("logs.old");
        std::fs::rename(&logs, &gone).unwrap();
        std::thread::sleep(ROTATION_CHECK + POLL * 2);
        log.write(numbered(1));
        lines_in(&gone.join("access.log"), 2);
        assert_eq!(log.reopened(), 0);
    }
}
