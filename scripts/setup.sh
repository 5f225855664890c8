#!/usr/bin/env bash
# Install what caisson needs on a Debian machine, idempotently:
# Debian packages (docker.io, strace, tcpdump, debootstrap, git), a venv in .venv with
# caisson and its test dependencies. Safe to run again; fast when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(docker.io strace tcpdump debootstrap git ca-certificates python3-venv iptables dnsutils curl)
# The agent image installs the agent CLIs with the host's npm; Debian's npm when there is none.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.caisson-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing caisson and its dependencies into .venv"
    .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v -i warning || true
    .venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v -i warning || true
    .venv/bin/python -c "import caisson, ledger, collectors, trio, msgspec, zstandard, cryptography" 
    touch "$stamp"
fi
