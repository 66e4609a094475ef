#!/usr/bin/env bash
# Smoke-runs every fuzz target in fuzz/ (STYLE.md rule 14): builds them once with cargo-fuzz on
# the nightly toolchain, then runs each for FUZZ_SECONDS (default 20), as many at once as there
# are cores, from a fresh corpus seeded with fuzz/seeds/TARGET (and the dictionary
# fuzz/dicts/TARGET.dict, if there is one), and fails if any target finds a crash, a failed
# assertion or a timeout.
# Prints one line per target with the number of inputs libFuzzer ran.
#
# Environment:
#   FUZZ_SECONDS=20          how long each target runs
#   FUZZ_TIMEOUT=10          seconds one input may take before it counts as a hang
#   FUZZ_JOBS=$(nproc)       how many targets run at once (libFuzzer uses one core per target)
#   HEADWAY_FUZZ_OPTIONAL=1  exit 0 with a message (instead of failing) when the nightly toolchain
#                            or cargo-fuzz is not available
#
# A crashing input is saved by libFuzzer under fuzz/artifacts/TARGET/ (ignored by git); replay it
# with `cd fuzz && cargo +nightly fuzz run TARGET artifacts/TARGET/crash-…`, and add it to
# fuzz/seeds/TARGET/ once fixed so it stays fixed.
set -euo pipefail

cd "$(dirname "$0")/.."
FUZZ_DIR="$PWD/fuzz"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"
export PATH="$HOME/.cargo/bin:$PATH"
# The fuzz project is its own workspace; keep its nightly, sanitizer-built artefacts in
# fuzz/target whatever the caller's CARGO_TARGET_DIR says, so the main target dir is untouched.
export CARGO_TARGET_DIR="$FUZZ_DIR/target"

unavailable() {
    if [[ "${HEADWAY_FUZZ_OPTIONAL:-0}" == 1 ]]; then
        echo "fuzz-smoke: SKIPPED: $1 (HEADWAY_FUZZ_OPTIONAL=1)"
        exit 0
    fi
    echo "fuzz-smoke: $1; set HEADWAY_FUZZ_OPTIONAL=1 to skip the fuzz smoke run instead" >&2
    exit 1
}

if ! cargo +nightly --version >/dev/null 2>&1; then
    unavailable "the nightly toolchain is not installed (rustup toolchain install nightly)"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked || unavailable "cargo-fuzz could not be installed"
fi

cd "$FUZZ_DIR"
work="$(mktemp -d "${TMPDIR:-/tmp}/headway-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# No AddressSanitizer: the fuzzed crates are safe Rust (the only `unsafe` is in headway-io, the
# platform crate, whose system calls no fuzzed parser makes), and the C libraries they link are
# not instrumented anyway. Without it the targets build in two thirds of the time and run 2-6x
# as many inputs.
# Replaying a crash with or without `-s none` reproduces it (a panic is a panic either way).
build_flags=(--sanitizer none)
echo "fuzz-smoke: building the fuzz targets"
cargo +nightly fuzz build "${build_flags[@]}"
mapfile -t targets < <(cargo +nightly fuzz list)
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz-smoke: no fuzz targets found in $FUZZ_DIR" >&2
    exit 1
fi

# Runs one target into $work/TARGET.log and writes its verdict (what is printed for it, an
# "ok:" line or the failure's report) to $work/TARGET.verdict.
run_target() {
    local target=$1 corpus="$work/corpus/$1" log="$work/$1.log"
    mkdir -p "$corpus"
    if [[ -d "seeds/$target" ]]; then
        cp -- "seeds/$target"/* "$corpus"/ 2>/dev/null || true
    fi
    local seeds
    seeds=$(find "$corpus" -type f | wc -l)
    local extra=()
    if [[ -f "dicts/$target.dict" ]]; then
        extra+=("-dict=dicts/$target.dict")
    fi
    local status=0
    cargo +nightly fuzz run "${build_flags[@]}" "$target" "$corpus" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout="$TIMEOUT" \
        "${extra[@]}" >"$log" 2>&1 || status=$?
    # libFuzzer ends a run that found nothing with "Done N runs in T second(s)".
    local done_line
    done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1 || true)
    if [[ $status -eq 0 && -n "$done_line" ]]; then
        local runs secs inputs
        read -r _ runs _ _ secs _ <<<"$done_line"
        inputs=$(find "$corpus" -type f | wc -l)
        printf 'fuzz-smoke: %-15s ok: %s runs in %s s (corpus %s -> %s inputs)\n' \
            "$target" "$runs" "$secs" "$seeds" "$inputs" >"$work/$target.verdict"
        return
    fi
    {
        printf 'fuzz-smoke: %-15s FAILED (exit %s):\n' "$target" "$status"
        # The panic message with its assertion, then libFuzzer's verdict and the saved input.
        local report
        report=$(
            awk '/panicked at/ { on = 1 } /^stack backtrace:|^note: / { on = 0 } on' "$log" |
                head -n 30
            grep -E '^(SUMMARY: |==[0-9]+== ?ERROR|artifact_prefix=|Base64: )' "$log" || true
        )
        if [[ -z "$report" ]]; then
            report=$(tail -n 30 "$log")
        fi
        sed 's/^/    /' <<<"$report"
    } >"$work/$target.verdict"
}

# libFuzzer runs one target on one core: run as many targets at once as there are cores.
jobs="${FUZZ_JOBS:-$(nproc)}"
running=0
for target in "${targets[@]}"; do
    if ((running >= jobs)); then
        wait -n || true # the verdict files, not the exit codes, say how a target did
        running=$((running - 1))
    fi
    run_target "$target" &
    running=$((running + 1))
done
wait || true

failed=()
for target in "${targets[@]}"; do
    cat "$work/$target.verdict" 2>/dev/null || echo "fuzz-smoke: $target gave no verdict"
    grep -q ' ok: ' "$work/$target.verdict" 2>/dev/null || failed+=("$target")
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz-smoke: FAILED: ${failed[*]} (inputs saved under fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} targets ok"
