//! Headway's network-namespace lab.
//!
//! This crate owns everything `headway lab …` does on one Linux host:
//!
//! - [`netns`]: running `ip`, `ethtool` and `sysctl` with clear errors, creating and deleting
//!   namespaces, veth pairs, addresses and routes, and starting and stopping processes inside a
//!   namespace;
//! - [`topology`]: the pure plans of the `pair`, `branch` and `dual-wan` topologies (names,
//!   interfaces, addresses from the RFC 2544 benchmarking range 198.18.0.0/15, routes) and the
//!   code that builds them;
//! - [`spec`]: both directions of an emulated link ([`LinkSetting`], held as
//!   [`headway_link::Params`]) and how they are written as [`headway_config::LinkSpec`] text for
//!   `headway emulate` and `headway ctl`;
//! - [`presets`]: named link settings for the seeds' WAN scenarios;
//! - [`lab`]: the [`Lab`] guard (build a topology, start one emulator per WAN namespace, tear
//!   everything down on drop) and the state file that lets a later command find a running lab;
//! - [`tool`]: the small measurement programs run inside namespaces (`headway lab tool …`);
//! - [`calibrate`]: `headway lab calibrate`, the seed's dummynet calibration run against our
//!   emulator, with its report;
//! - [`cli`]: the [`LabCommand`] the binary embeds as `headway lab …`, and [`run`].
//!
//! - [`fetch`]: the HTTP download tool (`headway lab tool fetch`) the demo and benchmarks use;
//! - [`bench`](mod@bench): `headway bench …`, scenario benchmarks beside same-run baselines;
//! - [`demo`]: `headway demo`, the main job on an embedded default;
//! - [`report`]: charts for reports.
//! - [`page`], [`clients`], [`synflood`]: the tools of the ADC's TCP-profile and flood
//!   benchmarks (a browser-like page download, fixed-rate clients, a bounded SYN flooder);
//!   [`netstat`]: the kernel's TCP counters of a namespace.
//!
//! It does not implement the link model or the emulator (that is `headway emulate`, which the lab
//! starts as a child process of the same binary).
//!
//! Entry points: [`run`] for the command line; [`Lab::up`] for library use (tests, benchmarks):
//!
//! ```no_run
//! use headway_lab::{Lab, LabOptions, TopologyKind};
//! let lab = Lab::up(LabOptions::new(TopologyKind::Pair))?;
//! let out = lab.exec("client", &["ping", "-c", "1", &lab.addresses().server.to_string()])?;
//! assert!(out.status.success());
//! lab.down()?; // or let it drop
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! Invariants: every namespace the lab creates is named with its prefix (`hw-` by default), so
//! [`lab::cleanup`] can always find and remove leftovers of a crashed run; every address is in
//! 198.18.0.0/15; every process the lab starts runs in its own process group inside a lab
//! namespace, and is killed before its namespace is deleted.
#![forbid(unsafe_code)]

pub mod bench;
pub mod calibrate;
pub mod cli;
pub mod clients;
pub mod demo;
pub mod fetch;
pub mod interrupt;
pub mod lab;
pub mod netns;
pub mod netstat;
pub mod optimizer;
pub mod page;
pub mod presets;
pub mod report;
pub mod spec;
pub mod stats;
pub mod synflood;
pub mod tool;
pub mod topology;
pub mod xfer;

pub use bench::BenchCommand;
pub use cli::{run, LabCommand};
pub use demo::DemoArgs;
pub use lab::{Background, Lab, LabOptions, LabState, WanMode};
pub use spec::{Dir, LinkSetting};
pub use topology::{Addresses, TopologyKind};
