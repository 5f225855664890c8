#!/usr/bin/env bash
# Install what caisson needs on a Debian machine, idempotently:
# Debian packages (docker.io, strace, tcpdump, debootstrap, git), a venv in .venv with
# caisson and its test dependencies. Safe to run again; fast when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(docker.io strace tcpdump debootstrap git ca-certificates python3-venv iptables dnsutils curl)
# The eBPF syscall witness (caisson record --syscall-witness ebpf) runs on the host: its libbpf
# loader (collectors/bpf/, built below with clang, llvm's llvm-strip, bpftool and libbpf-dev),
# or bpftrace where that did not build.
PACKAGES+=(bpftrace clang llvm libbpf-dev bpftool)
# The ledger's native modules (ledger/_chainc.c, the chain loop, and ledger/_appendc.c, the
# writer's append) build with a C compiler and OpenSSL's headers; without them caisson
# still installs, with their slower pure-Python twins.
PACKAGES+=(gcc libc6-dev libssl-dev)
# The HTML report's test and `caisson view`'s browser tests drive Debian's Chromium
# (Playwright with its executable_path; no browser download).
PACKAGES+=(chromium)
PYTHON="${PYTHON:-python3}"
builder="$PYTHON"  # the interpreter that will build the extension: the venv's, once it exists
[ -x .venv/bin/python ] && builder=.venv/bin/python
"$builder" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    2>/dev/null || PACKAGES+=(python3-dev)
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

# bpftrace attaches to tracepoints through tracefs; some kernels boot without it mounted.
if [ "$(id -u)" -eq 0 ] && [ -d /sys/kernel/tracing ] && [ ! -d /sys/kernel/tracing/events ]; then
    mount -t tracefs nodev /sys/kernel/tracing || echo "setup: could not mount tracefs: the eBPF witness will fall back to strace" >&2
fi

# The eBPF witness's libbpf backend: a CO-RE program and its loader, with vmlinux.h made from
# this kernel's BTF (scripts/build_ebpf.sh), into collectors/bpf/build/ (gitignored). Built
# again when a source is newer than the loader; without it caisson runs bpftrace (slower) and
# says so once. A failed build leaves no loader, so the next setup tries again.
loader=collectors/bpf/build/caisson-ebpf
if [ ! -x "$loader" ] || [ -n "$(find collectors/bpf scripts/build_ebpf.sh -maxdepth 1 -type f -newer "$loader" 2>/dev/null)" ]; then
    echo "setup: building the eBPF witness's libbpf loader"
    if ! scripts/build_ebpf.sh; then
        echo "setup: warning: the eBPF witness's libbpf loader did not build; the eBPF witness will run bpftrace" >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.caisson-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] || [ ledger/_chainc.c -nt "$stamp" ] || [ ledger/_appendc.c -nt "$stamp" ]; then
    echo "setup: installing caisson and its dependencies into .venv"
    log=$(mktemp)
    # "compat" editable mode puts the checkout on sys.path with a plain .pth; the default
    # mode installs an import hook that costs every caisson command ~25 ms at start-up.
    # setuptools calls compat transitional: when it is gone, the default mode is used.
    if ! { .venv/bin/python -m pip install -q --upgrade pip \
           && { .venv/bin/python -m pip install -q -e '.[test]' --config-settings editable_mode=compat \
                || .venv/bin/python -m pip install -q -e '.[test]'; }; } >"$log" 2>&1; then
        cat "$log"
        echo "setup: pip install failed (full log above)" >&2
        exit 1
    fi
    rm -f "$log"
    .venv/bin/python -c "import caisson, ledger, collectors, trio, msgspec, zstandard, cryptography"
    if .venv/bin/python -c "import ledger._chainc, ledger._appendc" 2>/dev/null; then
        touch "$stamp"
    else  # no stamp: the next setup tries the build again
        echo "setup: warning: the ledger's native modules did not build (gcc, libssl-dev); using the slower pure-Python ones"
    fi
fi
# Bytecode for the checkout, as pip writes it for installed packages: with
# PYTHONDONTWRITEBYTECODE set (some images set it) every command would otherwise compile
# caisson's sources anew, about 100 ms per `caisson record`. Only changed files recompile.
.venv/bin/python -m compileall -q caisson ledger collectors
