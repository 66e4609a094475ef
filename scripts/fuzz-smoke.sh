#!/usr/bin/env bash
# Smoke-runs every fuzz target in fuzz/ (STYLE.md rule 14): builds them once with cargo-fuzz on
# the nightly toolchain, then runs each for FUZZ_SECONDS (default 20) from a fresh corpus seeded
# with fuzz/seeds/TARGET (and the dictionary fuzz/dicts/TARGET.dict, if there is one), and fails
# if any target finds a crash, a failed assertion or a timeout.
# Prints one line per target with the number of inputs libFuzzer ran.
#
# Environment:
#   FUZZ_SECONDS=20          how long each target runs
#   FUZZ_TIMEOUT=10          seconds one input may take before it counts as a hang
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

echo "fuzz-smoke: building the fuzz targets"
cargo +nightly fuzz build
mapfile -t targets < <(cargo +nightly fuzz list)
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz-smoke: no fuzz targets found in $FUZZ_DIR" >&2
    exit 1
fi

failed=()
for target in "${targets[@]}"; do
    corpus="$work/corpus/$target"
    log="$work/$target.log"
    mkdir -p "$corpus"
    if [[ -d "seeds/$target" ]]; then
        cp -- "seeds/$target"/* "$corpus"/ 2>/dev/null || true
    fi
    seeds=$(find "$corpus" -type f | wc -l)
    extra=()
    if [[ -f "dicts/$target.dict" ]]; then
        extra+=("-dict=dicts/$target.dict")
    fi
    status=0
    cargo +nightly fuzz run "$target" "$corpus" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout="$TIMEOUT" \
        "${extra[@]}" >"$log" 2>&1 || status=$?
    # libFuzzer ends a run that found nothing with "Done N runs in T second(s)".
    done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1 || true)
    if [[ $status -eq 0 && -n "$done_line" ]]; then
        read -r _ runs _ _ secs _ <<<"$done_line"
        inputs=$(find "$corpus" -type f | wc -l)
        printf 'fuzz-smoke: %-12s ok: %s runs in %s s (corpus %s -> %s inputs)\n' \
            "$target" "$runs" "$secs" "$seeds" "$inputs"
    else
        printf 'fuzz-smoke: %-12s FAILED (exit %s):\n' "$target" "$status"
        # The panic message with its assertion, then libFuzzer's verdict and the saved input.
        report=$(
            awk '/panicked at/ { on = 1 } /^stack backtrace:|^note: / { on = 0 } on' "$log" |
                head -n 30
            grep -E '^(SUMMARY: |==[0-9]+== ?ERROR|artifact_prefix=|Base64: )' "$log" || true
        )
        if [[ -z "$report" ]]; then
            report=$(tail -n 30 "$log")
        fi
        sed 's/^/    /' <<<"$report"
        failed+=("$target")
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz-smoke: FAILED: ${failed[*]} (inputs saved under fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} targets ok"
