//! `headway bench adc --compression`: HTTP compression throughput and ratio, HAProxy, NGINX and
//! Headway side by side on loopback, beside seed 002's ratio table (`f5_compression_ratio.csv`).
//!
//! One `headway origin` serves HTML (`/corpus/html/SIZE`, 60–80 % compressible; the 512 KiB page
//! is the 64 KiB page repeated, as in the F5 report). Each proxy compresses every size (the
//! report's devices were "told to always compress"): HAProxy with `compression algo gzip` (its
//! default `tune.comp.maxlevel 1`), NGINX with `gzip on` at its default `gzip_comp_level 1`,
//! Headway twice in one process — gzip only (at its default level), and with its default codec
//! order for a browser's `Accept-Encoding` (zstd) — and once more uncompressed (`identity`), the
//! ceiling of its compressed rows. The origin is measured directly too, as the uncompressed
//! reference. Per size and row: requests/s and MB/s of uncompressed content (wrk,
//! keep-alive, `Accept-Encoding` set), the proxy's CPU-seconds per 100,000 requests, and the
//! ratio of one probe response (original bytes over encoded body bytes, headers and chunk
//! framing not counted). Medians over `--repeats`, rows taking turns in a rotating order, like
//! the main matrix. The CPU bypass is off: this measures compression, not its absence.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::load::{self, Load, PerConnection};
use super::procs::{self, TempDir};
use super::{
    command_line, config, fmt_cpu, host_line, is_interrupt, launch, load_average, size_label,
    start_origin, status_lines, thousands, AdcArgs, Ends, Entry, Instance, Sample, Target,
    Versions,
};
use crate::interrupt;

/// Seed 002's compression ratios (original / compressed): size, BIG-IP 8800, NetScaler 12000.
pub const SEED_RATIOS: [(u64, f64, f64); 5] = [
    (128, 0.45528, 0.56036),
    (2 << 10, 1.59636, 1.21030),
    (8 << 10, 2.15674, 1.30240),
    (64 << 10, 3.14766, 2.41297),
    (512 << 10, 3.40133, 7.74997),
];

/// A browser's `Accept-Encoding` (Chrome and Firefox since 2024).
pub const BROWSER: &str = "gzip, deflate, br, zstd";

/// What a row is measured through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    /// The origin, uncompressed: the reference.
    Origin,
    /// HAProxy's gzip.
    Haproxy,
    /// NGINX's gzip (the baseline of the ratios).
    Nginx,
    /// Headway offering gzip only.
    HeadwayGzip,
    /// Headway with its default codec order, for a browser's `Accept-Encoding`.
    Headway,
    /// Headway not compressing (`Accept-Encoding: identity`): its proxying alone, the ceiling
    /// of any compressed row's rate.
    HeadwayIdentity,
}

impl Row {
    const ALL: [Row; 6] = [
        Row::Origin,
        Row::Haproxy,
        Row::Nginx,
        Row::HeadwayGzip,
        Row::Headway,
        Row::HeadwayIdentity,
    ];

    /// Its name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Row::Origin => "origin (direct, uncompressed)",
            Row::Haproxy => "HAProxy gzip",
            Row::Nginx => "NGINX gzip",
            Row::HeadwayGzip => "Headway gzip",
            Row::Headway => "Headway (zstd, br, gzip)",
            Row::HeadwayIdentity => "Headway, uncompressed (the ceiling)",
        }
    }

    /// Its name in CSV.
    pub fn key(self) -> &'static str {
        match self {
            Row::Origin => "origin",
            Row::Haproxy => "haproxy-gzip",
            Row::Nginx => "nginx-gzip",
            Row::HeadwayGzip => "headway-gzip",
            Row::Headway => "headway-default",
            Row::HeadwayIdentity => "headway-identity",
        }
    }

    /// The `Accept-Encoding` its load sends.
    pub fn accept(self) -> &'static str {
        match self {
            Row::Headway => BROWSER,
            Row::HeadwayIdentity => "identity",
            _ => "gzip",
        }
    }
}

/// The origin path of the HTML page of `size` bytes; the 512 KiB page repeats the 64 KiB one.
pub fn path(size: u64) -> String {
    if size == 512 << 10 {
        format!("/corpus/html/{size}?repeat={}", 64 << 10)
    } else {
        format!("/corpus/html/{size}")
    }
}

/// Media types each proxy compresses (the origin's HTML is `text/html`).
const TYPES: &str = "text/html text/plain text/css application/json application/javascript";

/// HAProxy's config: one HTTP listener, keep-alive to the origin, gzip.
pub fn haproxy(origin: SocketAddr, workers: u32, listen: SocketAddr, maxconn: u32) -> String {
    format!(
        "# headway bench adc --compression: HAProxy's gzip in front of `headway origin`.\n\
         global\n    nbthread {workers}\n    maxconn {maxconn}\n    # the default level\n    \
         tune.comp.maxlevel 1\n\n\
         defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\n\
         frontend l7\n    mode http\n    bind {listen}\n    default_backend origin\n\n\
         backend origin\n    mode http\n    http-reuse always\n{}    compression algo gzip\n    \
         compression type {TYPES}\n    server origin {origin}\n",
        config::haproxy_forwarding("http")
    )
}

/// NGINX's config: the main matrix's `http {}` with `gzip on` at NGINX's default level and no
/// minimum length; no stream module.
pub fn nginx(
    origin: SocketAddr,
    workers: u32,
    listen: SocketAddr,
    maxconn: u32,
    dir: &Path,
) -> String {
    let base = config::nginx_http(origin, workers, listen, maxconn, dir);
    let gzip = format!(
        "http {{\n    gzip on;\n    gzip_comp_level 1;\n    gzip_min_length 0;\n    \
         gzip_proxied any;\n    gzip_vary on;\n    gzip_types {};\n",
        TYPES.replace("text/html ", "")
    );
    base.replacen("http {\n", &gzip, 1)
}

/// Headway's config: two virtual servers on one server group — `gzip` offers gzip only,
/// `default` the default codec order — both compressing every size, the CPU bypass off.
pub fn headway(
    origin: SocketAddr,
    workers: u32,
    gzip: SocketAddr,
    default: SocketAddr,
    admin: SocketAddr,
) -> String {
    let vs = |name: &str, listen: SocketAddr, codecs: &str| {
        format!(
            "[[virtual_server]]\nname = \"{name}\"\nkind = \"http\"\nlisten = \"{listen}\"\n\
             group = \"origin\"\n[virtual_server.compression]\n{codecs}min_size = \"0\"\n\
             cpu_bypass = \"off\"\n\n"
        )
    };
    format!(
        "# headway bench adc --compression: Headway in front of `headway origin`.\n\
         [admin]\nlisten = \"{admin}\"\n\n[runtime]\nworkers = {workers}\n\n\
         [[server_group]]\nname = \"origin\"\n[[server_group.server]]\naddress = \"{origin}\"\n\n\
         {}{}",
        vs("gzip", gzip, "codecs = [\"gzip\"]\n"),
        vs("default", default, "")
    )
}

/// One response as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The status code.
    pub status: u16,
    /// `Content-Encoding`, if any.
    pub encoding: Option<String>,
    /// Body bytes as sent (chunk framing removed).
    pub body: u64,
}

impl Probe {
    /// `original / body`; `None` for an empty body.
    pub fn ratio(&self, original: u64) -> Option<f64> {
        (self.body > 0).then(|| original as f64 / self.body as f64)
    }
}

/// Reads a whole HTTP/1.1 response (the connection closed after it): status, encoding and the
/// body's length, de-chunked.
pub fn parse_response(raw: &[u8]) -> Result<Probe> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of the response head")?;
    let head = std::str::from_utf8(&raw[..end]).context("a response head that is not text")?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("no status line")?;
    let (mut encoding, mut chunked) = (None, false);
    for l in lines {
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-encoding") {
            encoding = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let mut rest = &raw[end + 4..];
    if !chunked {
        return Ok(Probe {
            status,
            encoding,
            body: rest.len() as u64,
        });
    }
    let mut body = 0u64;
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk size line without its end")?;
        let line = std::str::from_utf8(&rest[..eol]).context("a chunk size that is not text")?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let n = u64::from_str_radix(hex, 16).with_context(|| format!("bad chunk size {line:?}"))?;
        if n == 0 {
            return Ok(Probe {
                status,
                encoding,
                body,
            });
        }
        let start = eol + 2;
        let stop = start + usize::try_from(n)? + 2;
        if rest.len() < stop {
            bail!("a chunk cut short");
        }
        body += n;
        rest = &rest[stop..];
    }
}

/// One GET of `path` with `accept` as `Accept-Encoding`, read to the end.
fn probe(addr: SocketAddr, path: &str, accept: &str) -> Result<Probe> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept-Encoding: {accept}\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// Everything measured for one size and row.
#[derive(Debug, Clone, Default)]
struct Cell {
    entry: Entry,
    probe: Option<Result<Probe, String>>,
}

/// Runs the compression benchmark.
pub fn run(args: AdcArgs) -> Result<()> {
    let seconds = args.seconds_or(2, 3).max(1);
    let repeats = args.repeats_or(1, 2).max(1);
    let sizes: Vec<u64> = if args.sizes.is_empty() {
        SEED_RATIOS.iter().map(|r| r.0).collect()
    } else {
        args.sizes.iter().map(|s| s.bytes()).collect()
    };
    let versions = Versions::probe();
    if versions.wrk.is_none() {
        bail!("`wrk` is not installed: run `bash scripts/setup.sh` (as root) first");
    }
    let load_at_start = load_average();
    let tmp = TempDir::new("headway-bench-compression")?;
    let ticks = procs::clock_ticks_per_second()?;
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let mut port = procs::port_source(6)?;
    let workers = args.workers.max(1);
    let maxconn = config::max_connections(args.connections);

    let origin = port();
    let mut instances: Vec<Instance> = vec![start_origin(&exe, origin, &args, tmp.path())?];
    let mut configs: Vec<(String, String)> = Vec::new();
    let mut rows: Vec<(Row, SocketAddr, usize)> = vec![(Row::Origin, origin, 0)];
    let wanted = |t: Target| args.proxies.contains(&t);
    for target in [Target::Haproxy, Target::Nginx, Target::Headway] {
        if !wanted(target) {
            continue;
        }
        let (a, b) = (port(), port());
        let (file, text, listens): (&str, String, Vec<(Row, SocketAddr)>) = match target {
            Target::Haproxy => (
                "haproxy-compression.cfg",
                haproxy(origin, workers, a, maxconn),
                vec![(Row::Haproxy, a)],
            ),
            Target::Nginx => (
                "nginx-compression.conf",
                nginx(origin, workers, a, maxconn, tmp.path()),
                vec![(Row::Nginx, a)],
            ),
            _ => (
                "headway-compression.toml",
                headway(origin, workers, a, b, port()),
                vec![
                    (Row::HeadwayGzip, a),
                    (Row::Headway, b),
                    (Row::HeadwayIdentity, a),
                ],
            ),
        };
        let addrs: Vec<SocketAddr> = listens.iter().map(|l| l.1).collect();
        let ends = Ends {
            l7: a,
            l4: a,
            h2: None,
            h2_both: None,
        };
        let inst = launch(target, ends, &addrs, file, &text, tmp.path(), &exe)?;
        if let Some(f) = &inst.failure {
            eprintln!("{}: {f}", target.key());
        }
        configs.push((file.to_string(), text));
        let i = instances.len();
        instances.push(inst);
        rows.extend(listens.into_iter().map(|(r, addr)| (r, addr, i)));
    }

    let mut results: std::collections::BTreeMap<(u64, Row), Cell> = Default::default();
    // Ratios first: one response per size and row.
    for &size in &sizes {
        for &(row, addr, i) in &rows {
            if instances[i].proc.is_none() {
                continue;
            }
            let p = probe(addr, &path(size), row.accept()).map_err(|e| format!("{e:#}"));
            results.entry((size, row)).or_default().probe = Some(p);
        }
    }
    let running = rows
        .iter()
        .filter(|r| instances[r.2].proc.is_some())
        .count();
    eprintln!(
        "adc --compression: {} sizes × {running} rows × {repeats} runs of {seconds} s: about {} min",
        sizes.len(),
        ((sizes.len() * running * repeats as usize) as f64 * (seconds as f64 + 0.2) / 60.0).ceil()
    );
    let script = tmp.path().join("unused.lua");
    for &size in &sizes {
        for round in 0..repeats as usize {
            for k in 0..rows.len() {
                interrupt::check()?;
                let (row, addr, i) = rows[(k + round) % rows.len()];
                let Some(proc) = instances[i].proc.as_ref() else {
                    continue;
                };
                let load = Load {
                    url: format!("http://{addr}{}", path(size)),
                    threads: args.threads.max(1),
                    connections: args.load_connections(),
                    seconds,
                };
                let mut argv = load::wrk_argv(&load, PerConnection::Unlimited, &script);
                let url = argv.pop().unwrap_or_default();
                argv.extend([
                    "-H".into(),
                    format!("Accept-Encoding: {}", row.accept()),
                    url,
                ]);
                let entry = &mut results.entry((size, row)).or_default().entry;
                match run_load(&argv, proc.pid(), tmp.path(), seconds, ticks) {
                    Ok(s) => {
                        eprintln!(
                            "  {} · {} · run {}: {:.0} req/s, {} CPU-s/100k",
                            size_label(size),
                            row.key(),
                            round + 1,
                            s.outcome.good_per_second(),
                            s.cpu_per_100k().map_or("–".into(), fmt_cpu)
                        );
                        entry.samples.push(s);
                    }
                    Err(e) if is_interrupt(&e) => return Err(e),
                    Err(e) => {
                        eprintln!("  {} · {}: {e:#}", size_label(size), row.key());
                        entry.errors.push(format!("{e:#}"));
                    }
                }
            }
        }
    }
    let status = status_lines(&instances);
    drop(instances);
    let shown: Vec<Row> = Row::ALL
        .into_iter()
        .filter(|r| rows.iter().any(|x| x.0 == *r))
        .collect();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## HTTP compression on loopback: HAProxy, NGINX and Headway in front of one `headway origin`\n\n\
         Command: `{}`\n\nHost: {}; load average (1 / 5 / 15 min) {} at the start, {} at the end. \
         Versions: {}.\n\nSetup: the origin serves HTML (`/corpus/html/SIZE`, 60–80 % \
         compressible; 512 KiB is the 64 KiB page repeated, `?repeat=65536`). HAProxy \
         `compression algo gzip` (`tune.comp.maxlevel 1`, its default); NGINX `gzip on`, \
         `gzip_comp_level 1` (its default), `gzip_min_length 0`; Headway `gzip` (level {}) and \
         its default order zstd (level {}), br, gzip for `Accept-Encoding: {BROWSER}`, \
         `min_size = \"0\"`, CPU bypass off. {} workers each, keep-alive to the origin. Load: \
         `wrk -t {} -c {}` with `Accept-Encoding` set, keep-alive, {seconds} s per run, the median \
         of {repeats} run(s), rows taking turns in a rotating order.\n",
        command_line(),
        host_line(),
        load_at_start,
        load_average(),
        versions.line(),
        headway_config::compress::Codec::Gzip.default_level(),
        headway_config::compress::Codec::Zstd.default_level(),
        workers,
        args.threads,
        args.connections,
    );
    for s in &status {
        let _ = writeln!(md, "- {s}");
    }
    md += &render(&sizes, &shown, &results);
    let csv = render_csv(&sizes, &shown, &results);
    println!("{md}");
    super::write_report(
        &args.out,
        &[("compression.md", &md), ("compression.csv", &csv)],
        "adc-configs",
        &configs,
    )
}

/// One wrk run with the target's CPU time read before and after.
fn run_load(argv: &[String], pid: i32, dir: &Path, seconds: u32, ticks: u64) -> Result<Sample> {
    let before = procs::cpu_ticks(pid)?;
    let mut tool = procs::Proc::spawn(argv, &dir.join("load.log"))?;
    let status = tool.wait_exit(Duration::from_secs(u64::from(seconds) + 30))?;
    let after = procs::cpu_ticks(pid)?;
    let outcome = load::parse_wrk(&tool.log_text())
        .with_context(|| format!("`{}` ({status})", tool.command()))?;
    if outcome.good == 0 {
        bail!("no good response ({} socket errors)", outcome.socket_errors);
    }
    Ok(Sample {
        outcome,
        cpu_seconds: after.saturating_sub(before) as f64 / ticks as f64,
    })
}

/// The Markdown tables: requests/s, uncompressed MB/s, ratio beside the seed's, CPU.
fn render(
    sizes: &[u64],
    rows: &[Row],
    results: &std::collections::BTreeMap<(u64, Row), Cell>,
) -> String {
    let cols: String = rows.iter().map(|r| format!(" {} |", r.label())).collect();
    let rule: String = rows.iter().map(|_| "---:|").collect();
    let table = |title: &str,
                 value: &dyn Fn(u64, &Cell) -> Option<f64>,
                 fmt: &dyn Fn(f64) -> String| {
        let mut s = format!("\n### {title}\n\n| size |{cols}\n|---:|{rule}\n");
        for &size in sizes {
            let _ = write!(s, "| {} |", size_label(size));
            let base = results
                .get(&(size, Row::Nginx))
                .and_then(|c| value(size, c));
            for &r in rows {
                let text = match results.get(&(size, r)) {
                    Some(c) => match value(size, c) {
                        Some(v) => {
                            let mut x = fmt(v);
                            if let (Some(b), true) = (base, r != Row::Nginx && r != Row::Origin) {
                                let _ = write!(x, " ({:.2}×)", v / b);
                            }
                            if !c.entry.errors.is_empty() || c.entry.trouble() != (0, 0) {
                                x.push_str(" †");
                            }
                            x
                        }
                        None if !c.entry.errors.is_empty() => "error †".into(),
                        None => "–".into(),
                    },
                    None => "failed".into(),
                };
                let _ = write!(s, " {text} |");
            }
            s.push('\n');
        }
        s
    };
    let mut md = table(
        "Requests/s (median; × NGINX gzip; higher is better)",
        &|_, c| c.entry.rps(),
        &|v| thousands(v.round() as u64),
    );
    md += &table(
        "MB/s of uncompressed content delivered (median; × NGINX gzip)",
        &|size, c| c.entry.rps().map(|r| r * size as f64 / 1e6),
        &|v| format!("{v:.1}"),
    );
    md += &table(
        "CPU-seconds per 100,000 requests, the proxy's own (median; × NGINX gzip; lower is better)",
        &|_, c| c.entry.cpu_per_100k(),
        &fmt_cpu,
    );
    // The ratio table, beside the seed's.
    let _ = write!(
        md,
        "\n### Compression ratio (original / compressed body), beside seed 002's\n\n\
         | size | BIG-IP 8800 (seed) | NetScaler 12000 (seed) |{cols}\n|---:|---:|---:|{rule}\n"
    );
    for &size in sizes {
        let seed = SEED_RATIOS.iter().find(|r| r.0 == size);
        let _ = write!(
            md,
            "| {} | {} | {} |",
            size_label(size),
            seed.map_or("–".into(), |r| format!("{:.2}", r.1)),
            seed.map_or("–".into(), |r| format!("{:.2}", r.2))
        );
        for &r in rows {
            let text = match results.get(&(size, r)).and_then(|c| c.probe.as_ref()) {
                Some(Ok(p)) => match (p.ratio(size), &p.encoding) {
                    (Some(x), Some(e)) => format!("{x:.2} ({e})"),
                    (Some(x), None) => format!("{x:.2} (identity)"),
                    _ => format!("– (status {})", p.status),
                },
                Some(Err(e)) => format!("error: {}", e.replace('|', "\\|")),
                None => "failed".into(),
            };
            let _ = write!(md, " {text} |");
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "\nHow to read it: requests/s count 2xx/3xx responses of wrk over keep-alive connections; \
         MB/s is requests/s × the page's uncompressed size, the content a client gets; CPU is \
         user + system time of the proxy's processes (`/proc/PID/stat`) during the runs, per \
         100,000 responses (the Headway rows are one process, measured in turn). \
         \"Headway, uncompressed\" asks for `identity`: the same proxy without compressing, the \
         most Headway's compressed rows could reach on this machine (where it is below 2× \
         NGINX's gzip, no codec could take Headway there). The ratio is \
         the page's size over one response's encoded body (chunk framing and headers not \
         counted); the seed's devices were 2007 hardware compressing the F5 report's own HTML. \
         gzip's 32 KiB window cannot reach back 64 KiB, so the repeated 512 KiB page compresses \
         like the 64 KiB one with gzip; zstd and brotli see the repetition. † marks runs with \
         errors."
    );
    md
}

/// The CSV: a row per run and a `median` row per size and row.
fn render_csv(
    sizes: &[u64],
    rows: &[Row],
    results: &std::collections::BTreeMap<(u64, Row), Cell>,
) -> String {
    let mut csv = String::from(
        "size_bytes,target,run,good_responses,seconds,requests_per_s,uncompressed_mb_per_s,\
         cpu_seconds,cpu_s_per_100k,encoding,ratio\n",
    );
    for &size in sizes {
        for &r in rows {
            let Some(c) = results.get(&(size, r)) else {
                continue;
            };
            let (enc, ratio) = match &c.probe {
                Some(Ok(p)) => (
                    p.encoding.clone().unwrap_or_else(|| "identity".into()),
                    p.ratio(size).map(|x| format!("{x:.4}")).unwrap_or_default(),
                ),
                _ => (String::new(), String::new()),
            };
            for (i, s) in c.entry.samples.iter().enumerate() {
                let rps = s.outcome.good_per_second();
                let _ = writeln!(
                    csv,
                    "{size},{},{},{},{:.3},{rps:.1},{:.3},{:.3},{},{enc},{ratio}",
                    r.key(),
                    i + 1,
                    s.outcome.good,
                    s.outcome.seconds,
                    rps * size as f64 / 1e6,
                    s.cpu_seconds,
                    s.cpu_per_100k()
                        .map(|v| format!("{v:.4}"))
                        .unwrap_or_default(),
                );
            }
            let rps = c.entry.rps();
            let _ = writeln!(
                csv,
                "{size},{},median,,,{},{},,{},{enc},{ratio}",
                r.key(),
                rps.map(|v| format!("{v:.1}")).unwrap_or_default(),
                rps.map(|v| format!("{:.3}", v * size as f64 / 1e6))
                    .unwrap_or_default(),
                c.entry
                    .cpu_per_100k()
                    .map(|v| format!("{v:.4}"))
                    .unwrap_or_default(),
            );
        }
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn responses_are_read_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(
            parse_response(plain).unwrap(),
            Probe {
                status: 200,
                encoding: None,
                body: 5
            }
        );
        let chunked =
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n\
                        3\r\nabc\r\na;x=1\r\n0123456789\r\n0\r\n\r\n";
        let p = parse_response(chunked).unwrap();
        assert_eq!((p.encoding.as_deref(), p.body), (Some("gzip"), 13));
        assert_eq!(p.ratio(26), Some(2.0));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nff\r\nabc")
                .is_err()
        );
    }

    #[test]
    fn pages_and_seed_ratios() {
        assert_eq!(path(2048), "/corpus/html/2048");
        assert_eq!(path(512 << 10), "/corpus/html/524288?repeat=65536");
        assert_eq!(SEED_RATIOS[4], (524_288, 3.40133, 7.74997));
        assert_eq!(Row::Headway.accept(), BROWSER);
        assert_eq!(Row::Nginx.accept(), "gzip");
        assert_eq!(Row::HeadwayIdentity.accept(), "identity");
    }

    #[test]
    fn configs_compress_with_each_proxys_gzip() {
        let h = haproxy(addr(8080), 2, addr(8001), 4096);
        for want in [
            "nbthread 2",
            "compression algo gzip",
            "compression type text/html",
            "bind 127.0.0.1:8001",
            "server origin 127.0.0.1:8080",
        ] {
            assert!(h.contains(want), "{want} in\n{h}");
        }
        let n = nginx(addr(8080), 2, addr(8001), 4096, Path::new("/tmp/x"));
        for want in [
            "gzip on;",
            "gzip_comp_level 1;",
            "gzip_min_length 0;",
            "gzip_types text/plain",
            "listen 127.0.0.1:8001;",
            "keepalive 64;",
        ] {
            assert!(n.contains(want), "{want} in\n{n}");
        }
        assert!(!n.contains("stream {"));
        assert_eq!(n.matches('{').count(), n.matches('}').count());
        let t = headway(addr(8080), 2, addr(8001), addr(8002), addr(9290));
        let cfg = headway_config::Config::parse(&t, "bench.toml").unwrap();
        let vs = &cfg.adc.virtual_servers;
        let z = |i: usize| vs[i].compression.clone().unwrap();
        assert_eq!(z(0).codecs, [headway_config::compress::Codec::Gzip]);
        assert_eq!(z(1).codecs, headway_config::compress::Codec::ALL);
        assert!(z(0).cpu_bypass.is_none() && z(1).min_size == 0);
    }
}
