#!/bin/sh
# Build the chamber root filesystem with debootstrap and write it as a tarball.
#
# usage: build-rootfs.sh SUITE VARIANT MIRROR PACKAGES_FILE USER UID GID HOME OUT_TAR
#
# Needs root (debootstrap chroots). Uses no image registry: only the Debian mirror.
set -eu

suite=$1 variant=$2 mirror=$3 pkgfile=$4 user=$5 uid=$6 gid=$7 home=$8 out=$9

root=$(mktemp -d "${TMPDIR:-/var/tmp}/caisson-rootfs.XXXXXX")
cleanup() {
    # debootstrap unmounts /proc and /sys itself; never delete through a mount.
    for m in proc sys dev/pts; do
        mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true
    done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT

include=$(sed -e 's/#.*//' "$pkgfile" | tr -s ' \t\n' '\n' | grep -v '^$' | paste -sd, -)

debootstrap --variant="$variant" --include="$include" "$suite" "$root" "$mirror"

chroot "$root" groupadd --gid "$gid" "$user"
chroot "$root" useradd --uid "$uid" --gid "$gid" --create-home --home-dir "$home" \
    --shell /bin/bash "$user"

# Keep the image small and free of host identity: Docker provides resolv.conf, hosts
# and hostname at run time.
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
    "$root"/var/cache/debconf/*-old "$root"/var/log/*.log "$root"/var/log/apt/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* "$root"/tmp/* "$root"/var/tmp/*
: > "$root/etc/resolv.conf"
: > "$root/etc/hostname"

tar --numeric-owner --xattrs -C "$root" -cf "$out" .
