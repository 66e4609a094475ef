//! Tells the crate whether this compiler has the AVX-512 intrinsics (stable since Rust 1.89):
//! older toolchains, such as a distribution's, build without the wide BLAKE3 kernels
//! (AVX-512 and AVX2 alike, so that one cfg gates both).

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(headway_simd_blake3)");
    println!("cargo::rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let minor = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split(['.', ' '])
                .nth(2)
                .and_then(|m| m.parse::<u32>().ok())
        });
    if minor.is_some_and(|m| m >= 89) {
        println!("cargo::rustc-cfg=headway_simd_blake3");
    }
}
