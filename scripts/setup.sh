#!/usr/bin/env bash
# Installs what octet's build and tests need on Debian 12 — only what is missing,
# so running it again is cheap: the Debian packages of the build (and Chromium, which the
# report test opens the HTML report in), and a Python
# virtual environment (.venv) with the reference packages the tests compare against.
# clang, libclang-rt-14-dev (libFuzzer) and libomp-14-dev (OpenMP for clang): make fuzz.
# fortunes: the English text of the FP8 recipe study (scripts/real_text.sh, docs/numerics.md).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build git pkg-config libgtest-dev libboost-context-dev
          libdnnl-dev libopenblas-dev libsleef-dev libsentencepiece-dev nlohmann-json3-dev libcli11-dev openmpi-bin
          libopenmpi-dev python3
          python3-venv python3-pip chromium clang libclang-rt-14-dev libomp-14-dev
          fortunes)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The oracles: ml_dtypes (FP8 conversions), numpy (float64 references),
# safetensors (checkpoint format), pytest (runs them).
if ! .venv/bin/python -c "import numpy, ml_dtypes, safetensors, pytest" 2>/dev/null; then
  echo "setup: creating .venv with the Python reference packages"
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
fi
