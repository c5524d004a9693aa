#!/usr/bin/env bash
# Install what the benchmark needs: wrk (Debian) and PyTriton in its own venv (its pins differ from ours).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v wrk >/dev/null; then
    echo "bench: installing wrk ..."
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk; else sudo apt-get install -y wrk; fi
fi
if [ ! -x "$here/.venv-pytriton/bin/python" ]; then
    echo "bench: creating $here/.venv-pytriton with nvidia-pytriton ..."
    python3 -m venv "$here/.venv-pytriton"
    "$here/.venv-pytriton/bin/pip" install -q "nvidia-pytriton==0.7.0" "numpy<2"
fi
