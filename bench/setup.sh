#!/usr/bin/env bash
# Install what the benchmark needs: wrk (Debian) and PyTriton in its own venv (its pins differ from ours).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v wrk >/dev/null; then
    echo "bench: installing wrk ..."
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk; else sudo apt-get install -y wrk; fi
fi
# PyTriton 0.7 in bench/.venv-pytriton: `make pytriton` (a prerequisite of make bench; make test shares it).
make -C "$here/.." --no-print-directory pytriton
# The floor (bench/floor_backend: a backend that answers in Triton's own thread), which bench/pipeline.py runs beside
# the others to show what no backend can beat.
cargo build --quiet --release --manifest-path "$here/floor_backend/Cargo.toml"
