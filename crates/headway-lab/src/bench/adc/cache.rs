//! `headway bench adc --cache` and `--microcache`: the integrated cache against Varnish and
//! NGINX `proxy_cache`, in one run on loopback, with the same origin and load tool.
//!
//! **Cache matrix** (`--cache`, seed 002's F5 cache test): one `headway origin` serves
//! `/corpus/random/SIZE` with `Cache-Control: public, max-age=3600`; Varnish (`varnishd -F`,
//! default VCL, `malloc` storage), NGINX (`proxy_cache` in a temp dir) and Headway
//! (`[cache]`, one group) each run in front of it with their own config, ports and work dir.
//! Every URL is fetched twice through each cache before the load (the second must be a hit),
//! then wrk measures cache-hit requests/s at each size with 1, 10 and unlimited requests per
//! connection, and the target's CPU-seconds per 100,000 requests. The origin's CPU during each
//! run is read too: a cache that missed would make it work.
//!
//! **Microcaching** (`--microcache`, NGINX's microcaching anchor, about 400×): the origin's
//! `/dynamic` page takes 50 ms and its worker pool serves 4 at once (an application server);
//! Headway without a cache, Headway with a 1 s flash cache (`force_expiry = "1s"`) and NGINX
//! with `proxy_cache_valid 1s` + `proxy_cache_lock` take the same wrk load. A sampler fetches
//! the page every 20 ms through each cache during its run and records the oldest page seen
//! (the page's own `time_ms` against the clock): no page may be older than the flash time.
//!
//! Every process started here is stopped at the end (on error and Ctrl-C too); configs are
//! copied to `--out/adc-cache-configs/`.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::load::{self, Outcome};
use super::procs::{self, Proc, TempDir};
use super::{cells, fmt_cpu, is_interrupt, measure, size_label, thousands, AdcArgs, Cell};
use super::{Entry, RunContext, Test};
use crate::bench::median;
use crate::interrupt;

/// A cache measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Cache {
    /// The origin directly (the reference; no cache).
    Origin,
    /// Varnish.
    Varnish,
    /// NGINX `proxy_cache`.
    Nginx,
    /// Headway's integrated cache.
    Headway,
}

impl Cache {
    fn label(self) -> &'static str {
        match self {
            Cache::Origin => "origin (direct)",
            Cache::Varnish => "Varnish",
            Cache::Nginx => "NGINX proxy_cache",
            Cache::Headway => "Headway",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Cache::Origin => "origin",
            Cache::Varnish => "varnish",
            Cache::Nginx => "nginx",
            Cache::Headway => "headway",
        }
    }
}

/// A running target.
struct Running {
    cache: Cache,
    addr: SocketAddr,
    proc: Option<Proc>,
    failure: Option<String>,
}

/// One cell's measurement of one target: the load and the origin's CPU meanwhile.
#[derive(Default)]
struct Measured {
    entry: Entry,
    origin_cpu: Vec<f64>,
}

/// `--cache`: the F5 cache matrix.
pub fn run_cache(args: &AdcArgs) -> Result<()> {
    let seconds = args.seconds_or(2, 3).max(1);
    let repeats = args.repeats_or(1, 3).max(1);
    let sizes: Vec<u64> = args.sizes.iter().map(|s| s.bytes()).collect();
    let tests: Vec<Test> = if args.tests.is_empty() {
        vec![Test::L7One, Test::L7Ten, Test::L7Unlimited]
    } else {
        args.tests.clone()
    };
    let cells: Vec<Cell> = cells(args.quick, &tests, &sizes)
        .into_iter()
        .filter(|c| c.test.is_l7())
        .collect();
    anyhow::ensure!(!cells.is_empty(), "no L7 cell matches --tests / --sizes");
    let tmp = TempDir::new("headway-bench-cache")?;
    let script = tmp.path().join("ten-per-connection.lua");
    std::fs::write(&script, super::config::TEN_PER_CONNECTION_LUA)?;
    let exe = exe()?;
    let mut port = procs::port_source(8)?;
    let origin_addr = port();
    let origin = start_origin(
        &exe,
        origin_addr,
        args,
        tmp.path(),
        &["--cache-control", "public, max-age=3600"],
    )?;
    let mut configs = Vec::new();
    let mut targets = vec![Running {
        cache: Cache::Origin,
        addr: origin_addr,
        proc: None,
        failure: None,
    }];
    for cache in [Cache::Varnish, Cache::Nginx, Cache::Headway] {
        let (r, file) = start(
            cache,
            origin_addr,
            port(),
            port(),
            args,
            tmp.path(),
            &exe,
            Flavour::Headers,
        )?;
        configs.push(file);
        targets.push(r);
    }
    // Fill every cache, and check that the second fetch is a hit.
    let mut notes = Vec::new();
    for t in targets.iter_mut().filter(|t| t.cache != Cache::Origin) {
        if t.proc.is_none() {
            continue;
        }
        for size in cells
            .iter()
            .map(|c| c.size)
            .collect::<std::collections::BTreeSet<_>>()
        {
            let path = format!("/corpus/random/{size}");
            let checked = http_get(t.addr, &path).and_then(|_| http_get(t.addr, &path));
            match checked {
                Ok(r) if r.status == 200 && r.body_len == size as usize && is_hit(t.cache, &r) => {}
                Ok(r) => notes.push(format!(
                    "{}: the second GET of {path} was not a cache hit (status {}, {} bytes, {:?})",
                    t.cache.key(),
                    r.status,
                    r.body_len,
                    r.hit_fields
                )),
                Err(e) => notes.push(format!("{}: warming {path}: {e:#}", t.cache.key())),
            }
        }
    }
    let ticks = procs::clock_ticks_per_second()?;
    let ctx = RunContext {
        args,
        seconds,
        script: &script,
        dir: tmp.path(),
        ticks,
    };
    let mut results: std::collections::BTreeMap<(Cell, Cache), Measured> = Default::default();
    let running = targets
        .iter()
        .filter(|t| t.proc.is_some() || t.cache == Cache::Origin)
        .count();
    let runs = cells.len() * running * repeats as usize;
    eprintln!(
        "adc --cache: {} cells × {running} targets × {repeats} runs of {seconds} s: about {} min",
        cells.len(),
        (runs as f64 * (seconds as f64 + 0.3) / 60.0).ceil()
    );
    let mut done = 0;
    for cell in &cells {
        for round in 0..repeats as usize {
            let n = targets.len();
            for k in 0..n {
                interrupt::check()?;
                let t = &targets[(k + round) % n];
                let proc = match (&t.proc, t.cache) {
                    (Some(p), _) => p,
                    (None, Cache::Origin) => &origin,
                    _ => continue,
                };
                done += 1;
                let before = procs::cpu_ticks(origin.pid())?;
                let m = results.entry((*cell, t.cache)).or_default();
                match measure(&ctx, proc, cell, t.addr) {
                    Ok(s) => {
                        let after = procs::cpu_ticks(origin.pid())?;
                        let origin_cpu = after.saturating_sub(before) as f64 / ticks as f64;
                        eprintln!(
                            "  [{done}/{runs}] {} · {} · run {}: {:.0} req/s, {} CPU-s/100k (origin {:.2} CPU-s)",
                            cell.label(),
                            t.cache.key(),
                            round + 1,
                            s.outcome.good_per_second(),
                            s.cpu_per_100k().map_or("–".into(), fmt_cpu),
                            origin_cpu
                        );
                        if t.cache != Cache::Origin {
                            m.origin_cpu
                                .push(origin_cpu / s.outcome.good.max(1) as f64 * 1e5);
                        }
                        m.entry.samples.push(s);
                    }
                    Err(e) if is_interrupt(&e) => return Err(e),
                    Err(e) => {
                        eprintln!(
                            "  [{done}/{runs}] {} · {}: {e:#}",
                            cell.label(),
                            t.cache.key()
                        );
                        m.entry.errors.push(format!("{e:#}"));
                    }
                }
            }
        }
    }
    let status: Vec<String> = targets
        .iter()
        .map(|t| {
            format!(
                "| {} | {} | {} |",
                t.cache.label(),
                t.addr,
                match (&t.failure, &t.proc) {
                    (Some(f), _) => f.replace('|', "\\|"),
                    (None, Some(p)) => format!("ran (pid {})", p.pid()),
                    (None, None) => format!("ran (pid {})", origin.pid()),
                }
            )
        })
        .collect();
    drop(targets);
    drop(origin);
    let md = render_cache(args, seconds, repeats, &cells, &results, &status, &notes);
    println!("{md}");
    super::write_report(
        &args.out,
        &[("adc-cache.md", &md)],
        "adc-cache-configs",
        &configs,
    )?;
    Ok(())
}

/// `--microcache`: a slow dynamic origin with and without a 1 s flash cache.
pub fn run_microcache(args: &AdcArgs) -> Result<()> {
    let seconds = args.seconds_or(3, 10).max(2);
    let repeats = args.repeats.unwrap_or(1).max(1);
    let tmp = TempDir::new("headway-bench-microcache")?;
    let exe = exe()?;
    let mut port = procs::port_source(8)?;
    let origin_addr = port();
    let origin = start_origin(
        &exe,
        origin_addr,
        args,
        tmp.path(),
        &["--dynamic-concurrency", "4"],
    )?;
    let mut launch = |cache, flavour| {
        start(
            cache,
            origin_addr,
            port(),
            port(),
            args,
            tmp.path(),
            &exe,
            flavour,
        )
    };
    // Headway without a cache: its own instance with the cache off.
    let (plain, _) = launch(Cache::Headway, Flavour::None)?;
    let (flash, flash_file) = launch(Cache::Headway, Flavour::Flash)?;
    let (nginx, nginx_file) = launch(Cache::Nginx, Flavour::Flash)?;
    let configs = vec![flash_file, nginx_file];
    let path = "/dynamic?latency=50ms";
    let rows: [(&str, &Running); 3] = [
        ("Headway, no cache", &plain),
        ("Headway, 1 s flash cache", &flash),
        ("NGINX, 1 s proxy_cache (microcaching)", &nginx),
    ];
    let mut lines = Vec::new();
    let mut base = None;
    for (label, r) in rows {
        let Some(proc) = &r.proc else {
            lines.push(format!(
                "| {label} | failed: {} | | | | |",
                r.failure.clone().unwrap_or_default().replace('|', "\\|")
            ));
            continue;
        };
        let mut rps = Vec::new();
        let mut fetched = Vec::new();
        let mut oldest = 0u64;
        let mut samples = 0u64;
        let mut stale_age = 0u64;
        let mut errors = Vec::new();
        for _ in 0..repeats {
            interrupt::check()?;
            let before = dynamic_count(origin_addr)?;
            let sampler = Sampler::start(r.addr, path);
            let out = run_wrk(args, r.addr, path, seconds, tmp.path());
            let seen = sampler.stop();
            let after = dynamic_count(origin_addr)?;
            match out {
                Ok(o) => {
                    rps.push(o.good_per_second());
                    // The counter's own request is not the load's.
                    fetched.push(after.saturating_sub(before + 1) as f64 / o.seconds.max(0.001));
                    oldest = oldest.max(seen.oldest_ms);
                    samples += seen.samples;
                    stale_age = stale_age.max(seen.max_age_header);
                    eprintln!(
                        "  {label}: {:.0} req/s, {:.1} origin req/s, oldest page {} ms",
                        o.good_per_second(),
                        fetched.last().copied().unwrap_or(0.0),
                        seen.oldest_ms
                    );
                }
                Err(e) if is_interrupt(&e) => return Err(e),
                Err(e) => errors.push(format!("{e:#}")),
            }
            let _ = proc.pid();
        }
        let rps = median(&rps);
        if base.is_none() {
            base = rps;
        }
        lines.push(format!(
            "| {label} | {} | {} | {} | {} | {} |",
            rps.map_or("–".into(), |v| thousands(v.round() as u64)),
            match (rps, base) {
                (Some(v), Some(b)) if b > 0.0 => format!("{:.0}×", v / b),
                _ => "–".into(),
            },
            median(&fetched).map_or("–".into(), |v| format!("{v:.1}")),
            if samples > 0 {
                format!("{oldest} ms ({samples} samples, Age ≤ {stale_age} s)")
            } else {
                "–".into()
            },
            errors.join("; ").replace('|', "\\|"),
        ));
    }
    drop((plain, flash, nginx, origin));
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Microcaching: a slow dynamic page with and without a 1 s flash cache\n"
    );
    let _ = writeln!(md, "Command: `{}`\n", super::command_line());
    let _ = writeln!(
        md,
        "Host: {}. Load average at the end: {}.\n",
        super::host_line(),
        super::load_average()
    );
    let _ = writeln!(
        md,
        "Setup: `headway origin --dynamic-concurrency 4` serves `{path}`: a page made per request \
         in 50 ms by a pool of 4 workers (so at most 80 pages/s), `Cache-Control: private, \
         no-cache`, its request number and time in the body. Load: `wrk -t {t} -c {c} -d {seconds}s` \
         through each target ({repeats} run(s), median). Headway's flash cache is a content group with \
         `force_expiry = \"1s\"` (coalescing on); NGINX's microcache is `proxy_cache_valid any 1s`, \
         `proxy_cache_lock on`, `proxy_ignore_headers Cache-Control Expires Set-Cookie`. A sampler \
         fetched the page every 20 ms through each target during its run: *oldest page* is the \
         largest (receipt time − the page's own `time_ms`).\n",
        t = args.threads,
        c = args.connections,
    );
    let _ = writeln!(md, "| target | requests/s | × no cache | origin requests/s | oldest page seen | errors |\n|---|---:|---:|---:|---|---|");
    for l in lines {
        let _ = writeln!(md, "{l}");
    }
    let _ = writeln!(
        md,
        "\nThe public anchor: NGINX's microcaching write-up reports about 400× for a WordPress page \
         cached for 1 s. Target for Headway: ≥ 300× with no page older than the flash time (the \
         oldest page may exceed 1 s by the fetch that made it: 50 ms here)."
    );
    println!("{md}");
    super::write_report(
        &args.out,
        &[("adc-microcache.md", &md)],
        "adc-microcache-configs",
        &configs,
    )?;
    Ok(())
}

/// What a config says about caching.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    /// No cache (Headway only).
    None,
    /// Cache by the response's headers.
    Headers,
    /// Cache everything for 1 s, whatever the headers (the flash cache / microcaching).
    Flash,
}

#[allow(clippy::too_many_arguments)]
fn start(
    cache: Cache,
    origin: SocketAddr,
    listen: SocketAddr,
    admin: SocketAddr,
    args: &AdcArgs,
    dir: &Path,
    exe: &str,
    flavour: Flavour,
) -> Result<(Running, (String, String))> {
    let workers = args.workers.max(1);
    let tag = match flavour {
        Flavour::None => "plain",
        Flavour::Headers => "cache",
        Flavour::Flash => "flash",
    };
    let work = dir.join(format!("{}-{tag}", cache.key()));
    std::fs::create_dir_all(&work)?;
    let (file, text, argv, ready): (String, String, Vec<String>, Option<&str>) = match cache {
        Cache::Varnish => {
            let file = format!("varnish-{tag}.vcl");
            let path = work.join(&file);
            let text = varnish_vcl(origin);
            std::fs::write(&path, &text)?;
            let argv = vec![
                "varnishd".into(),
                "-F".into(),
                "-j".into(),
                "none".into(),
                "-a".into(),
                listen.to_string(),
                "-T".into(),
                "none".into(),
                "-f".into(),
                path.display().to_string(),
                "-n".into(),
                work.join("varnish").display().to_string(),
                "-s".into(),
                "malloc,1g".into(),
                "-p".into(),
                format!("thread_pools={workers}"),
            ];
            (file, text, argv, None)
        }
        Cache::Nginx => {
            let file = format!("nginx-{tag}.conf");
            let text = nginx_cache(origin, workers, listen, &work, flavour == Flavour::Flash);
            let path = work.join(&file);
            std::fs::write(&path, &text)?;
            let argv = vec![
                "nginx".into(),
                "-c".into(),
                path.display().to_string(),
                "-g".into(),
                "daemon off;".into(),
            ];
            (file, text, argv, None)
        }
        Cache::Headway => {
            let file = format!("headway-{tag}.toml");
            let text = headway_cache(origin, workers, listen, admin, flavour);
            let path = work.join(&file);
            std::fs::write(&path, &text)?;
            let argv = vec![
                exe.into(),
                "run".into(),
                "-c".into(),
                path.display().to_string(),
            ];
            (file, text, argv, Some("ready"))
        }
        Cache::Origin => bail!("the origin is not a cache"),
    };
    let started = Proc::spawn(&argv, &work.join("log"))
        .map_err(|e| format!("failed to start: {e:#}"))
        .and_then(
            |mut p| match p.wait_ready(ready, &[listen], Duration::from_secs(20)) {
                Ok(()) => Ok(Ok(p)),
                Err(e) if is_interrupt(&e) => Ok(Err(e)),
                Err(e) => Err(format!("failed to start: {e}: {}", p.log_tail(6))),
            },
        );
    let (proc, failure) = match started {
        Ok(Ok(p)) => (Some(p), None),
        Ok(Err(e)) => return Err(e),
        Err(why) => {
            eprintln!("{}: {why}", cache.key());
            (None, Some(why))
        }
    };
    Ok((
        Running {
            cache,
            addr: listen,
            proc,
            failure,
        },
        (file, text),
    ))
}

fn exe() -> Result<String> {
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    Ok(exe.to_string_lossy().into_owned())
}

fn start_origin(
    exe: &str,
    addr: SocketAddr,
    args: &AdcArgs,
    dir: &Path,
    extra: &[&str],
) -> Result<Proc> {
    let mut argv: Vec<String> = vec![
        exe.into(),
        "origin".into(),
        "--listen".into(),
        addr.to_string(),
        "--workers".into(),
        args.origin_workers.max(1).to_string(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    let mut p = Proc::spawn(&argv, &dir.join("origin.log"))?;
    if let Err(e) = p.wait_ready(None, &[addr], Duration::from_secs(15)) {
        if is_interrupt(&e) {
            return Err(e);
        }
        bail!("the origin failed to start: {e}: {}", p.log_tail(6));
    }
    Ok(p)
}

/// Varnish's VCL: the origin as its backend, the default logic (the origin's `max-age`).
fn varnish_vcl(origin: SocketAddr) -> String {
    format!(
        "vcl 4.1;\n# headway bench adc --cache: Varnish in front of `headway origin`; the builtin \
         VCL decides (the origin sends Cache-Control: public, max-age=3600).\n\
         backend origin {{\n    .host = \"{}\";\n    .port = \"{}\";\n}}\n",
        origin.ip(),
        origin.port()
    )
}

/// NGINX with `proxy_cache` (files in `dir`, served from the page cache once written): by the
/// origin's headers, or for 1 s whatever they say (`flash`: NGINX's microcaching recipe).
fn nginx_cache(
    origin: SocketAddr,
    workers: u32,
    listen: SocketAddr,
    dir: &Path,
    flash: bool,
) -> String {
    let d = dir.display();
    let micro = if flash {
        "            proxy_cache_valid any 1s;\n            proxy_ignore_headers Cache-Control Expires Set-Cookie;\n            proxy_cache_use_stale updating;\n"
    } else {
        ""
    };
    format!(
        "# headway bench adc: NGINX proxy_cache in front of `headway origin`.\n\
         worker_processes {workers};\nworker_rlimit_nofile 16384;\npid {d}/nginx.pid;\n\
         error_log {d}/nginx-error.log warn;\n\nevents {{\n    worker_connections 8192;\n}}\n\n\
         http {{\n    access_log off;\n    keepalive_requests 1000000;\n\
         \x20   client_body_temp_path {d}/client-body;\n    proxy_temp_path {d}/proxy;\n\
         \x20   fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    scgi_temp_path {d}/scgi;\n\
         \x20   proxy_cache_path {d}/cache levels=1:2 keys_zone=hw:64m max_size=2g inactive=1h use_temp_path=off;\n\n\
         \x20   upstream origin {{\n        server {origin};\n        keepalive 64;\n    }}\n\n\
         \x20   server {{\n        listen {listen};\n        location / {{\n\
         \x20           proxy_pass http://origin;\n            proxy_http_version 1.1;\n\
         \x20           proxy_set_header Connection \"\";\n            proxy_cache hw;\n\
         \x20           proxy_cache_lock on;\n{micro}\
         \x20           add_header X-Cache-Status $upstream_cache_status;\n        }}\n    }}\n}}\n"
    )
}

/// Headway: the origin's group, one `http` virtual server and the cache as `flavour` says.
fn headway_cache(
    origin: SocketAddr,
    workers: u32,
    listen: SocketAddr,
    admin: SocketAddr,
    flavour: Flavour,
) -> String {
    let cache = match flavour {
        Flavour::None => String::new(),
        Flavour::Headers => "[cache]\nmemory_limit = \"1GiB\"\ndefault_group = \"all\"\n\n\
                             [[cache.group]]\nname = \"all\"\nmax_object_size = \"1MiB\"\n"
            .to_string(),
        Flavour::Flash => "[cache]\ndefault_group = \"live\"\n\n[[cache.group]]\nname = \"live\"\n\
                           force_expiry = \"1s\"\n"
            .to_string(),
    };
    format!(
        "# headway bench adc: Headway's cache in front of `headway origin`.\n\
         [admin]\nlisten = \"{admin}\"\n\n[runtime]\nworkers = {workers}\n\n\
         [[server_group]]\nname = \"origin\"\n[[server_group.server]]\naddress = \"{origin}\"\n\n\
         [[virtual_server]]\nname = \"l7\"\nkind = \"http\"\nlisten = \"{listen}\"\ngroup = \"origin\"\n\n{cache}"
    )
}

/// What one GET returned.
#[derive(Debug)]
struct Got {
    status: u16,
    body_len: usize,
    body: Vec<u8>,
    /// `Age`, `X-Varnish` and `X-Cache-Status`, as sent.
    hit_fields: Vec<(String, String)>,
}

fn is_hit(cache: Cache, r: &Got) -> bool {
    let field = |n: &str| {
        r.hit_fields
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    match cache {
        // A hit carries the ids of this request and of the one that fetched it.
        Cache::Varnish => field("x-varnish").is_some_and(|v| v.split_whitespace().count() == 2),
        Cache::Nginx => field("x-cache-status") == Some("HIT"),
        Cache::Headway => field("age").is_some(),
        Cache::Origin => true,
    }
}

/// One HTTP/1.1 GET with `Connection: close`, read to the end.
fn http_get(addr: SocketAddr, path: &str) -> Result<Got> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("no response head from {addr}");
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("no status line")?;
    let mut hit_fields = Vec::new();
    let mut chunked = false;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            if k == "transfer-encoding" && v.contains("chunked") {
                chunked = true;
            }
            if ["age", "x-varnish", "x-cache-status"].contains(&k.as_str()) {
                hit_fields.push((k, v.trim().to_string()));
            }
        }
    }
    let mut body = buf[end + 4..].to_vec();
    if chunked {
        body = dechunk(&body);
    }
    Ok(Got {
        status,
        body_len: body.len(),
        body,
        hit_fields,
    })
}

/// The payload of a chunked body (enough for the bench's checks).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if n == 0 || b.len() < i + 2 + n {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + n]);
        b = &b[(i + 4 + n).min(b.len())..];
    }
    out
}

/// How many `/dynamic` pages the origin has made (asking makes one more).
fn dynamic_count(origin: SocketAddr) -> Result<u64> {
    let r = http_get(origin, "/dynamic")?;
    let v: serde_json::Value =
        serde_json::from_slice(&r.body).context("the origin's /dynamic page")?;
    v["n"]
        .as_u64()
        .context("no `n` in the origin's /dynamic page")
}

/// The staleness sampler of the microcache runs.
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Seen>,
}

#[derive(Default)]
struct Seen {
    samples: u64,
    oldest_ms: u64,
    max_age_header: u64,
}

impl Sampler {
    fn start(addr: SocketAddr, path: &str) -> Sampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let path = path.to_string();
        let thread = std::thread::spawn(move || {
            let mut seen = Seen::default();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(r) = http_get(addr, &path) {
                    let now = headway_core::clock::wall_clock()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&r.body) {
                        if let Some(t) = v["time_ms"].as_u64() {
                            seen.samples += 1;
                            seen.oldest_ms = seen.oldest_ms.max(now.saturating_sub(t));
                        }
                    }
                    if let Some((_, a)) = r.hit_fields.iter().find(|(k, _)| k == "age") {
                        seen.max_age_header = seen.max_age_header.max(a.parse().unwrap_or(0));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        });
        Sampler { stop, thread }
    }

    fn stop(self) -> Seen {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn run_wrk(
    args: &AdcArgs,
    addr: SocketAddr,
    path: &str,
    seconds: u32,
    dir: &Path,
) -> Result<Outcome> {
    let l = load::Load {
        url: format!("http://{addr}{path}"),
        threads: args.threads.max(1),
        connections: args.load_connections(),
        seconds,
    };
    let argv = load::wrk_argv(&l, load::PerConnection::Unlimited, Path::new(""));
    let mut tool = Proc::spawn(&argv, &dir.join("wrk.log"))?;
    let status = tool.wait_exit(Duration::from_secs(u64::from(seconds) + 30))?;
    let text = tool.log_text();
    let o = load::parse_wrk(&text).with_context(|| format!("`{}` ({status})", tool.command()))?;
    if o.good == 0 {
        bail!(
            "no good response ({} bad, {} socket errors)",
            o.bad_status(),
            o.socket_errors
        );
    }
    Ok(o)
}

/// The cache matrix report.
fn render_cache(
    args: &AdcArgs,
    seconds: u32,
    repeats: u32,
    cells: &[Cell],
    results: &std::collections::BTreeMap<(Cell, Cache), Measured>,
    status: &[String],
    notes: &[String],
) -> String {
    let targets = [Cache::Origin, Cache::Varnish, Cache::Nginx, Cache::Headway];
    let mut md = String::new();
    let _ = writeln!(md, "## Seed 002's F5 cache matrix on loopback: Headway's cache, Varnish and NGINX proxy_cache\n");
    let _ = writeln!(md, "Command: `{}`\n", super::command_line());
    let _ = writeln!(
        md,
        "Host: {}. Load average at the end: {}.\n",
        super::host_line(),
        super::load_average()
    );
    let _ = writeln!(
        md,
        "Setup: everything on 127.0.0.1. `headway origin` ({ow} workers) serves \
         `/corpus/random/SIZE` with `Cache-Control: public, max-age=3600`; each URL was fetched \
         twice through every cache before the load and the second fetch had to be a hit. Varnish: \
         `varnishd -F`, the builtin VCL, `-s malloc,1g`, `thread_pools={w}`. NGINX: \
         `worker_processes {w}`, `proxy_cache` on files in a temp dir (served from the page cache), \
         keep-alive to the origin. Headway: `[runtime] workers = {w}`, `[cache]` with one group. \
         Load: `wrk -t {t} -c {c}`, {seconds} s per run, median of {repeats}; targets take turns \
         in rotating order. *origin CPU* is the origin's CPU-seconds per 100,000 requests through \
         the cache during the run: about zero when every request is a hit.\n",
        ow = args.origin_workers,
        w = args.workers,
        t = args.threads,
        c = args.connections,
    );
    let _ = writeln!(md, "| target | listens | status |\n|---|---|---|");
    for s in status {
        let _ = writeln!(md, "{s}");
    }
    let cols: String = targets
        .iter()
        .map(|t| format!(" {} |", t.label()))
        .collect();
    let rule: String = targets.iter().map(|_| "---:|").collect();
    let table = |title: &str,
                 value: &dyn Fn(&Measured) -> Option<f64>,
                 fmt: &dyn Fn(f64) -> String,
                 ratio: bool| {
        let mut s = format!("\n### {title}\n\n| test | size |{cols}\n|---|---:|{rule}\n");
        for cell in cells {
            let _ = write!(s, "| {} | {} |", cell.test.label(), size_label(cell.size));
            let base = results.get(&(*cell, Cache::Varnish)).and_then(value);
            for t in targets {
                let text = match results.get(&(*cell, t)).and_then(value) {
                    Some(v) => {
                        let mut x = fmt(v);
                        if let (Some(b), true) =
                            (base, ratio && (t == Cache::Headway || t == Cache::Nginx))
                        {
                            let _ = write!(x, " ({:.2}×)", v / b);
                        }
                        x
                    }
                    None => "–".into(),
                };
                let _ = write!(s, " {text} |");
            }
            s.push('\n');
        }
        s
    };
    md += &table(
        "Cache-hit requests/s (median; × Varnish's; higher is better)",
        &|m| m.entry.rps(),
        &|v| thousands(v.round() as u64),
        true,
    );
    md += &table(
        "CPU-seconds per 100,000 requests (median; × Varnish's; lower is better)",
        &|m| m.entry.cpu_per_100k(),
        &fmt_cpu,
        true,
    );
    md += &table(
        "Origin CPU-seconds per 100,000 requests through the cache (median; ~0 = all hits)",
        &|m| median(&m.origin_cpu),
        &fmt_cpu,
        false,
    );
    let _ = writeln!(
        md,
        "\nRows: *1 req/conn* sends `Connection: close` on every request; *10 req/conn* closes every \
         10th request of a wrk thread (a Lua script); *unlimited* is keep-alive. Requests/s count \
         2xx/3xx answers. CPU is user + system time of the target's processes (Varnish's manager and \
         child, NGINX's master and workers, Headway) from `/proc`, per 100,000 good responses; the load \
         tool, the origin and the target share two cores, so requests/s is bounded by all three and \
         CPU per request is the target's own cost."
    );
    let trouble: Vec<String> = results
        .iter()
        .filter_map(|((cell, t), m)| {
            let (sock, bad) = m.entry.trouble();
            let mut parts: Vec<String> = m.entry.errors.clone();
            if sock + bad > 0 {
                parts.push(format!("{sock} socket errors, {bad} error statuses"));
            }
            (!parts.is_empty())
                .then(|| format!("- {}, {}: {}", cell.label(), t.key(), parts.join("; ")))
        })
        .collect();
    if !notes.is_empty() || !trouble.is_empty() {
        let _ = writeln!(md, "\nNotes:\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
        for t in trouble {
            let _ = writeln!(md, "{t}");
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    #[test]
    fn the_configs_cache_as_described() {
        let v = varnish_vcl(a(8080));
        assert!(
            v.starts_with("vcl 4.1;") && v.contains(".port = \"8080\""),
            "{v}"
        );
        let n = nginx_cache(a(8080), 2, a(8001), Path::new("/tmp/x"), false);
        for want in [
            "proxy_cache hw;",
            "keys_zone=hw:64m",
            "listen 127.0.0.1:8001;",
            "server 127.0.0.1:8080;",
            "worker_processes 2;",
        ] {
            assert!(n.contains(want), "missing {want} in\n{n}");
        }
        assert!(!n.contains("proxy_cache_valid"));
        assert_eq!(n.matches('{').count(), n.matches('}').count());
        let micro = nginx_cache(a(8080), 2, a(8001), Path::new("/tmp/x"), true);
        assert!(micro.contains("proxy_cache_valid any 1s;"));
        for flavour in [Flavour::None, Flavour::Headers, Flavour::Flash] {
            let text = headway_cache(a(8080), 2, a(8001), a(9290), flavour);
            let cfg = headway_config::Config::parse(&text, "h.toml").unwrap();
            match flavour {
                Flavour::None => assert!(cfg.adc.cache.is_none()),
                Flavour::Headers => assert_eq!(cfg.adc.cache.unwrap().groups[0].force_expiry, None),
                Flavour::Flash => assert_eq!(
                    cfg.adc.cache.unwrap().groups[0].force_expiry,
                    Some(Duration::from_secs(1))
                ),
            }
        }
    }

    #[test]
    fn chunked_bodies_are_read() {
        assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), b"abcde");
    }
}
