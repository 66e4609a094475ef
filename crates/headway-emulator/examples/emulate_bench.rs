//! Measures the emulator against the kernel's own bridge on this machine.
//!
//! Builds `hwt-emu-<pid>-bench-{c,w,s}` (client — wan — server), then:
//!
//! 1. kernel bridge in the wan namespace: ping RTT and iperf3 TCP throughput (the baseline);
//! 2. the emulator with a transparent link: ping RTT (added delay), iperf3 TCP throughput, the
//!    emulator's own release timing error;
//! 3. the emulator at 100 Mbit/s and 50 ms each way: iperf3 TCP, release timing error, and the
//!    long-run rate measured from the model's passed bytes while a UDP flood keeps it saturated.
//!
//! Needs root, iperf3 and ping. Run it on an otherwise idle machine:
//! `cargo run --release -p headway-emulator --example emulate_bench -- [secs] [batch|perframe] [adaptive|MARGIN_US] [all|zero|rate] [SLICE_US|default]`
#![allow(clippy::print_stdout)]

#[path = "../tests/support/topo.rs"]
mod topo;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use headway_core::{Rate, SystemClock};
use headway_emulator::{Bridge, BridgeConfig, BridgeHandle, DirectionStats, SendMode, Tuning};
use headway_link::{Params, QueueLimit};
use topo::{in_netns, run, Topology, SERVER_IP};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10);
    let send = match args.get(1).map(String::as_str) {
        Some("perframe") => SendMode::PerFrame,
        _ => SendMode::Batch,
    };
    let spin_margin = args
        .get(2)
        .and_then(|a| a.parse::<u64>().ok())
        .map(Duration::from_micros);
    let which = args.get(3).map_or("all", String::as_str).to_owned();
    let slice = match args.get(4).map(String::as_str) {
        Some("default") => None,
        Some(us) => us.parse().ok().map(Duration::from_micros),
        None => Tuning::default().slice,
    };
    let tuning = Tuning {
        send,
        spin_margin,
        slice,
        ..Tuning::default()
    };
    println!("tuning: {tuning:?}, {secs} s per iperf3 run");

    let t = Topology::new("bench")?;
    if which == "all" || which == "zero" {
        transparent(&t, tuning, secs)?;
    }
    if which == "all" || which == "rate" {
        rate_limited(&t, tuning, secs)?;
    }
    Ok(())
}

fn transparent(t: &Topology, tuning: Tuning, secs: u64) -> anyhow::Result<()> {
    // 1. Kernel bridge baseline.
    run(
        "ip",
        &["-n", &t.wan, "link", "add", "br0", "type", "bridge"],
    )?;
    for dev in ["wa", "wb"] {
        run("ip", &["-n", &t.wan, "link", "set", dev, "master", "br0"])?;
    }
    run("ip", &["-n", &t.wan, "link", "set", "br0", "up"])?;
    let (base_avg, base_min) = ping(t)?;
    println!("kernel bridge: ping rtt avg {base_avg:.3} ms min {base_min:.3} ms");
    let (bps, retr) = iperf(t, &["-t", &secs.to_string()])?;
    println!(
        "kernel bridge: iperf3 tcp {:.0} Mbit/s, {retr} retransmits",
        bps / 1e6
    );
    run("ip", &["-n", &t.wan, "link", "del", "br0"])?;

    // 2. Transparent emulator.
    let bridge = start(t, Params::default(), tuning)?;
    let h = bridge.handle();
    let (avg, min) = ping(t)?;
    println!(
        "emulator 0 ms: ping rtt avg {avg:.3} ms min {min:.3} ms -> added per direction avg {:.3} ms",
        (avg - base_avg) / 2.0
    );
    let cpu0 = cpu_seconds();
    let (bps, retr) = iperf(t, &["-t", &secs.to_string()])?;
    let cpu = cpu_seconds() - cpu0;
    println!(
        "emulator 0 ms: iperf3 tcp {:.0} Mbit/s, {retr} retransmits, emulator cpu {:.2} s for {secs} s",
        bps / 1e6,
        cpu
    );
    report("emulator 0 ms", &h);
    bridge.stop();
    Ok(())
}

fn rate_limited(t: &Topology, tuning: Tuning, secs: u64) -> anyhow::Result<()> {
    // 3. 100 Mbit/s, 50 ms each way.
    let p = Params {
        rate: Some(Rate::from_mbps(100)),
        delay: Duration::from_millis(50),
        queue: QueueLimit {
            packets: Some(1000),
            bytes: None,
        },
        ..Params::default()
    };
    let bridge = start(t, p.clone(), tuning)?;
    let h = bridge.handle();
    let (bps, retr) = iperf(t, &["-t", &secs.to_string()])?;
    println!(
        "emulator 100M/50ms: iperf3 tcp {:.1} Mbit/s, {retr} retransmits",
        bps / 1e6
    );
    report("emulator 100M/50ms tcp", &h);
    bridge.stop();

    let bridge = start(t, p, tuning)?;
    let h = bridge.handle();
    let sampler = std::thread::spawn({
        let h = h.clone();
        move || {
            // Skip the first second (queue filling), then measure over the next secs-2 s.
            std::thread::sleep(Duration::from_secs(2));
            let (t0, b0) = (SystemClock::now(), h.stats().a_to_b.link.passed_bytes);
            std::thread::sleep(Duration::from_secs(secs.saturating_sub(3).max(1)));
            let (t1, b1) = (SystemClock::now(), h.stats().a_to_b.link.passed_bytes);
            (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64()
        }
    });
    let _ = iperf(
        t,
        &["-u", "-b", "150M", "-l", "1400", "-t", &secs.to_string()],
    )?;
    let rate = sampler.join().expect("sampler");
    println!(
        "emulator 100M/50ms: udp flood, model passed {:.3} Mbit/s of frames = {:+.3} % vs 100 Mbit/s",
        rate / 1e6,
        (rate / 1e8 - 1.0) * 100.0
    );
    report("emulator 100M/50ms udp", &h);
    bridge.stop();
    Ok(())
}

fn start(t: &Topology, p: Params, tuning: Tuning) -> anyhow::Result<Bridge> {
    let cfg = BridgeConfig {
        name: "bench".into(),
        a: "wa".into(),
        b: "wb".into(),
        a_to_b: p.clone(),
        b_to_a: p,
        seed: 1,
    };
    Ok(in_netns(&t.wan, || Bridge::start_with(cfg, tuning))?)
}

fn report(what: &str, h: &BridgeHandle) {
    let s = h.stats();
    for (dir, d) in [("a_to_b", &s.a_to_b), ("b_to_a", &s.b_to_a)] {
        let DirectionStats {
            timing_error_us: te,
            queueing_us: q,
            ..
        } = d;
        println!(
            "  {what} {dir}: passed {} lost {} overflow {} send_err {} kdrop {} trunc {} | timing error us mean {:.1} p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} | queueing ms p50 {:.2} p99 {:.2}",
            d.link.passed, d.link.lost, d.link.overflow, d.send_errors, d.kernel_drops, d.truncated,
            te.mean, te.p50, te.p90, te.p99, te.max, q.p50 / 1e3, q.p99 / 1e3
        );
    }
}

/// Average and minimum RTT of 500 pings 2 ms apart, in ms.
fn ping(t: &Topology) -> anyhow::Result<(f64, f64)> {
    let out = t
        .exec(
            &t.client,
            "ping",
            &["-q", "-c", "500", "-i", "0.002", SERVER_IP],
        )
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .ok_or_else(|| anyhow::anyhow!("no rtt line in {text}"))?;
    let nums: Vec<f64> = line
        .split('=')
        .nth(1)
        .unwrap_or("")
        .trim()
        .trim_end_matches(" ms")
        .split('/')
        .filter_map(|v| v.parse().ok())
        .collect();
    Ok((nums[1], nums[0]))
}

/// Runs one iperf3 client against a one-off server; returns (received bits/s, retransmits).
fn iperf(t: &Topology, args: &[&str]) -> anyhow::Result<(f64, u64)> {
    let mut server: Child = t
        .exec(
            &t.server,
            "iperf3",
            &["-s", "-1", "--forceflush", "-B", SERVER_IP],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    // Wait for the server's "listening" line before connecting.
    let mut lines = BufReader::new(server.stdout.take().expect("piped")).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("listening") => break,
            Some(Ok(_)) => continue,
            _ => anyhow::bail!("iperf3 server ended before listening"),
        }
    }
    let mut cargs = vec!["-c", SERVER_IP, "-J"];
    cargs.extend_from_slice(args);
    let out = t.exec(&t.client, "iperf3", &cargs).output()?;
    let _ = server.wait();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let end = &v["end"];
    let bps = end["sum_received"]["bits_per_second"]
        .as_f64()
        .or_else(|| end["sum"]["bits_per_second"].as_f64())
        .ok_or_else(|| anyhow::anyhow!("no throughput in iperf3 output: {}", v["error"]))?;
    let retr = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    Ok((bps, retr))
}

/// CPU time this process (the emulator threads) has used, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command name; 100 ticks/s.
    (ticks(11) + ticks(12)) / 100.0
}
