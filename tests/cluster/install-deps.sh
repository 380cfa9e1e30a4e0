#!/usr/bin/env bash
# Installs the Debian packages the local test cluster needs, only those missing
# (so a warm machine does no apt work). Run as root. Go (for the binaries and the
# image tool) is expected at /usr/local/go or on PATH.
set -euo pipefail

# containerd, runc: one container runtime per node; containernetworking-plugins:
# bridge, host-local and loopback CNI plugins (/usr/lib/cni); busybox-static: the
# test image; zfs-fuse: the nodes' pools; iproute2: netns, veth, bridge;
# iptables: the apiserver's service address inside each node's namespace;
# util-linux: nsenter, mount; procps: pgrep; curl: health checks.
pkgs=(containerd runc containernetworking-plugins busybox-static zfs-fuse iproute2 iptables util-linux procps curl)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing ${missing[*]}; run as root or: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: containerd would otherwise not pull more, but keep it lean.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts the containerd service on install where systemd runs; the cluster
# runs its own containerd per node and needs none of it.
