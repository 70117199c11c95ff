#!/usr/bin/env bash
# CI's fuzz step (docs/fuzzing.md): installs nightly and cargo-fuzz, then runs each
# target for a fixed time on its committed seeds, so a regression that makes one of them
# crash (a panic, a 500, a guest/native difference) fails CI. FUZZ_SECONDS (default 45)
# is the time per target; the whole step takes ~6 × that plus one build of the fuzz
# workspace (wasmtime, Cranelift and the builtins' guests again, instrumented: the longer
# part on a 2-core machine), within CI's 90 minutes.
set -euo pipefail
# The nightly that builds and runs the targets: dated, so CI does not change under a new
# nightly (docs/fuzzing.md says how to move it).
nightly=nightly-2026-10-01
cd "$(dirname "$0")"
seconds=${FUZZ_SECONDS:-45}

# Explicit, so it works where rustup's auto-install is off (RUSTUP_AUTO_INSTALL=0). The
# builtins' build script builds the guests with the toolchain that builds it: nightly
# needs the wasm target too.
rustup toolchain install "$nightly" --profile minimal --target wasm32-unknown-unknown
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi

# -s none: no sanitizer. The code under test is safe Rust (every crate but the runtime
# forbids `unsafe`) plus wasmtime, which OSS-Fuzz runs under ASan; an ASan build of
# wasmtime and Cranelift takes several times as long to build and run on 2 cores.
cargo "+$nightly" fuzz build -s none
for target in request differential upload api proto table; do
  mkdir -p "corpus/$target"
  echo "fuzz: $target for ${seconds}s"
  # A fresh corpus dir first (new inputs go there, not into the committed seeds).
  cargo "+$nightly" fuzz run -s none "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
done
