#!/usr/bin/env bash
# Starts the zfs-fuse daemon if it is not running, installing it when missing
# (Debian). Idempotent. On a host with OpenZFS (kernel module loaded), it does
# nothing: the zfs CLI already works.
set -euo pipefail

if command -v zpool >/dev/null 2>&1 && zpool list >/dev/null 2>&1; then
  exit 0 # a working ZFS (OpenZFS, or zfs-fuse already running)
fi
if ! command -v zfs-fuse >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "zfs-up: zfs-fuse is not installed; run as root or: apt-get install -y zfs-fuse" >&2
    exit 1
  fi
  echo "zfs-up: installing zfs-fuse" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq zfs-fuse >/dev/null
fi
if ! pgrep -x zfs-fuse >/dev/null; then
  [ -e /dev/fuse ] || { echo "zfs-up: /dev/fuse is missing: zfs-fuse cannot run here" >&2; exit 1; }
  echo "zfs-up: starting zfs-fuse" >&2
  rm -f /var/run/zfs/zfs_socket /var/run/zfs-fuse.pid
  zfs-fuse
fi
for _ in $(seq 1 50); do
  if zpool list >/dev/null 2>&1; then exit 0; fi
  sleep 0.2
done
echo "zfs-up: zfs-fuse started but zpool does not answer" >&2
exit 1
