//! Headway's micro-benchmarks (criterion), all in one executable: `cargo bench -p headway-bench`.
//!
//! This crate has no library code; the benchmarks live in `benches/micro.rs`, one group per
//! crate measured. Scenario benchmarks (through namespaces, beside peers) are `headway bench …`.
#![forbid(unsafe_code)]
