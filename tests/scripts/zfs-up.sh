#!/usr/bin/env bash
# Starts the zfs-fuse daemon if it is not running, installing it when missing
# (Debian). Idempotent. On a host with OpenZFS (kernel module loaded), it does
# nothing: the zfs CLI already works.
#
# zfs-fuse is a long-lived daemon shared by every test and by the local
# cluster's nodes, and it can wedge (a zpool command that never returns).
# A daemon that does not answer within ZFS_UP_TIMEOUT seconds is killed and
# started again, its stale mounts (ENOTCONN) detached. With ZFS_UP_FRESH=1
# (`make unit` sets it) a daemon that serves no pool is started afresh too,
# so a run never inherits a long-running daemon's state; a daemon serving a
# pool (a running cluster's) is never restarted while it answers.
set -euo pipefail

timeout_s=${ZFS_UP_TIMEOUT:-30}

answers() { timeout "$timeout_s" zpool list -H -o name 2>/dev/null; }

stop_fuse() {
  pkill -9 -x zfs-fuse 2>/dev/null || true
  for _ in $(seq 1 50); do pgrep -x zfs-fuse >/dev/null || break; sleep 0.1; done
  # The mounts of the dead daemon answer ENOTCONN: detach them.
  awk '$3 == "fuse.zfs" || ($3 == "fuse" && $2 == "/zfs-kstat") {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -f /var/run/zfs/zfs_socket /var/run/zfs-fuse.pid
}

if ! command -v zfs-fuse >/dev/null 2>&1; then
  if command -v zpool >/dev/null 2>&1 && zpool list >/dev/null 2>&1; then
    exit 0 # OpenZFS
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "zfs-up: zfs-fuse is not installed; run as root or: apt-get install -y zfs-fuse" >&2
    exit 1
  fi
  echo "zfs-up: installing zfs-fuse" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq zfs-fuse >/dev/null
fi

if pgrep -x zfs-fuse >/dev/null; then
  if pools=$(answers); then
    if [ "${ZFS_UP_FRESH:-0}" = 1 ] && [ -z "$pools" ]; then
      echo "zfs-up: restarting the idle zfs-fuse (a fresh daemon for this run)" >&2
      stop_fuse
    else
      exit 0
    fi
  else
    echo "zfs-up: zfs-fuse does not answer within ${timeout_s}s: killing it and starting it again" >&2
    stop_fuse
  fi
fi

[ -e /dev/fuse ] || { echo "zfs-up: /dev/fuse is missing: zfs-fuse cannot run here" >&2; exit 1; }
echo "zfs-up: starting zfs-fuse" >&2
rm -f /var/run/zfs/zfs_socket /var/run/zfs-fuse.pid
zfs-fuse
for _ in $(seq 1 50); do
  if timeout "$timeout_s" zpool list >/dev/null 2>&1; then exit 0; fi
  sleep 0.2
done
echo "zfs-up: zfs-fuse started but zpool does not answer" >&2
exit 1
