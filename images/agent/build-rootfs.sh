#!/bin/sh
# Turn the base recipe's root filesystem into the agent image's: add the npm agent CLIs
# and the PyPI agents, then write the result as a tarball.
#
# usage: build-rootfs.sh IN_TAR OUT_TAR RECIPE_DIR USER UID GID HOME
#
# IN_TAR is the base recipe's rootfs tarball (already holding this recipe's Debian
# packages). RECIPE_DIR holds npm-packages.txt, pip-packages.txt and optionally
# pip-constraints.txt (pinned transitive PyPI dependencies). Needs root (chroot) and the
# build host's `npm`; uses no image registry: only the npm registry and PyPI.
set -eu

in=$1 out=$2 recipe=$3 user=$4 uid=$5 gid=$6 home=$7

root=$(mktemp -d "${TMPDIR:-/var/tmp}/caisson-rootfs.XXXXXX")
cleanup() {
    for m in proc sys dev/pts; do
        mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true
    done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT

specs() { sed -e 's/#.*//' "$1" | tr -s ' \t\n' '\n' | grep -v '^$'; }

command -v npm >/dev/null || { echo "npm not installed on the build host: apt-get install nodejs npm" >&2; exit 1; }

tar --numeric-owner --xattrs -xpf "$in" -C "$root"
# Name resolution for pip inside the chroot; blanked again below (Docker provides it).
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"

# npm agents: installed by the host's npm straight into the image's /usr/local. Their
# native parts are prebuilt linux-x64 binaries picked from optionalDependencies (the
# host and the image are both glibc linux-x64); Claude Code's postinstall copies its
# native binary over bin/claude.exe.
echo "npm $(npm --version) (node $(node --version)) installing: $(specs "$recipe/npm-packages.txt" | paste -sd' ' -)"
# npm 11 runs no install script unless allowed (--allow-scripts): allow exactly the listed packages.
allow=$(specs "$recipe/npm-packages.txt" | sed -e 's/^\(@*[^@]*\)@.*/\1/' | paste -sd, -)
# shellcheck disable=SC2046
npm install --global --prefix "$root/usr/local" --no-audit --no-fund --no-update-notifier \
    --omit=dev --allow-scripts="$allow" $(specs "$recipe/npm-packages.txt")
# Claude Code's stub bin/claude.exe is a few hundred bytes until its postinstall ran.
claude_exe="$root/usr/local/lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
if [ -f "$claude_exe" ] && [ "$(stat -c %s "$claude_exe")" -lt 100000 ]; then
    echo "claude-code's postinstall did not install its native binary ($claude_exe)" >&2
    exit 1
fi

# PyPI agents: a virtualenv made by the image's own python3, so it runs in the image.
chroot "$root" python3 -m venv /opt/mini-swe-agent
cp "$recipe/pip-packages.txt" "$root/tmp/pip-packages.txt"
# The build host's CA bundle, for this install only (a TLS-inspecting proxy between the
# host and PyPI has a CA the image does not trust); not left in the image.
cp -L "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/tmp/build-host-ca.crt"
constraints=
if [ -f "$recipe/pip-constraints.txt" ]; then
    cp "$recipe/pip-constraints.txt" "$root/tmp/pip-constraints.txt"
    constraints="--constraint /tmp/pip-constraints.txt"
fi
# shellcheck disable=SC2086
chroot "$root" env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/tmp/build-host-ca.crt \
    /opt/mini-swe-agent/bin/pip install --no-cache-dir --requirement /tmp/pip-packages.txt \
    $constraints
chroot "$root" /opt/mini-swe-agent/bin/pip freeze --all > "$root/opt/mini-swe-agent/pip-freeze.txt"
for script in mini mini-swe-agent mini-extra; do
    ln -sf "/opt/mini-swe-agent/bin/$script" "$root/usr/local/bin/$script"
done

# The agent user's home exists and is theirs (the base recipe made it).
chroot "$root" chown -R "$uid:$gid" "$home"

umount "$root/proc"
rm -rf "$root"/tmp/* "$root"/var/tmp/* "$root"/root/.npm "$root"/root/.cache
: > "$root/etc/resolv.conf"

tar --numeric-owner --xattrs -C "$root" -cf "$out" .
