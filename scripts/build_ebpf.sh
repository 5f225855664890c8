#!/usr/bin/env bash
# Build the eBPF syscall witness's libbpf backend (collectors/bpf/) into collectors/bpf/build/:
#   vmlinux.h       the running kernel's types, from its BTF (bpftool), for CO-RE;
#   witness.bpf.o   the kernel program (clang -target bpf);
#   witness.skel.h  bpftool's skeleton, which embeds witness.bpf.o in the loader;
#   caisson-ebpf    the loader (cc, linked with libbpf).
# Needs clang, llvm, bpftool, libbpf-dev and a kernel with BTF (/sys/kernel/btf/vmlinux).
# Exit 0 with everything built; non-zero (why on stderr) otherwise, leaving no loader behind,
# so caisson uses bpftrace. Called by scripts/setup.sh; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
src=collectors/bpf
out=${EBPF_OUT:-$src/build}  # EBPF_OUT: build elsewhere (tests build a variant beside the real one)
BTF=${BTF:-/sys/kernel/btf/vmlinux}
PATH="$PATH:/usr/sbin:/sbin"  # Debian installs bpftool in /usr/sbin, off a non-root user's PATH
for tool in clang bpftool cc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "build_ebpf: $tool is not installed" >&2; exit 1; }
done
[ -r "$BTF" ] || { echo "build_ebpf: the kernel has no readable BTF ($BTF)" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out/caisson-ebpf"
tmp=$(mktemp -d "$out/.build.XXXXXX")  # on the same filesystem: the last mv is atomic
trap 'rm -rf "$tmp"' EXIT
case "$(uname -m)" in
    x86_64) arch=x86 ;;
    aarch64) arch=arm64 ;;
    *) arch=$(uname -m) ;;
esac
bpftool btf dump file "$BTF" format c > "$tmp/vmlinux.h"
# BPF_CFLAGS: extra clang flags, e.g. -DCAISSON_EXIT_BY_LIVE (witness.bpf.c) to test the exit
# path of kernels whose sched_process_exit has no group_dead on one that has it
clang -g -O2 -Wall -target bpf -D__TARGET_ARCH_$arch -I "$tmp" -I "$src" ${BPF_CFLAGS:-} \
    -c "$src/witness.bpf.c" -o "$tmp/witness.bpf.o"
if command -v llvm-strip >/dev/null 2>&1; then llvm-strip -g "$tmp/witness.bpf.o"; fi  # DWARF: BTF is kept
bpftool gen skeleton "$tmp/witness.bpf.o" name witness_bpf > "$tmp/witness.skel.h"
cc -O2 -Wall -I "$tmp" -I "$src" "$src/loader.c" -o "$tmp/caisson-ebpf" -lbpf -lelf -lz -lpthread
mv "$tmp/vmlinux.h" "$tmp/witness.bpf.o" "$tmp/witness.skel.h" "$out/"
mv "$tmp/caisson-ebpf" "$out/caisson-ebpf"  # last: its presence says the build is whole
