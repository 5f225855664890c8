#!/usr/bin/env bash
# Start the Docker engine (Debian's dockerd) in the background unless one answers,
# then wait until `docker info` answers (at most 60 s).
set -euo pipefail
if docker info >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
log="${TMPDIR:-/tmp}/caisson-dockerd.log"
echo "engine: starting dockerd (log: $log)"
$SUDO sh -c "nohup dockerd >'$log' 2>&1 &"
for _ in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then
        echo "engine: Docker $(docker version --format '{{.Server.Version}}') is up"
        exit 0
    fi
    sleep 0.5
done
echo "engine: dockerd did not answer within 60 s; see $log" >&2
tail -20 "$log" >&2 || true
exit 1
