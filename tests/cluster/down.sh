#!/usr/bin/env bash
# Tears the local test cluster down and leaves nothing behind: stops every
# process up.sh started (by the pids in its state dir), removes the pods'
# sandboxes through each node's runtime, destroys the nodes' zfs pools (only
# those whose vdev is this cluster's image file), unmounts everything under the
# state dir deepest first, deletes the namespaces and the bridge, removes the
# state dir. Safe to run when the cluster is down or half up.
# FERRY_E2E_KEEP_LOGS=DIR copies the components' logs to DIR first.
set -uo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

[ "$(id -u)" = 0 ] || die "run as root"
t0=$SECONDS
problems=0
problem() { log "WARNING: $*"; problems=$((problems + 1)); }

owns_var_lib_kubelet=0
[ -f "$STATE/created-var-lib-kubelet" ] && owns_var_lib_kubelet=1

if [ -n "${FERRY_E2E_KEEP_LOGS:-}" ] && [ -d "$LOGS" ]; then
  mkdir -p "$FERRY_E2E_KEEP_LOGS" && cp -r "$LOGS/." "$FERRY_E2E_KEEP_LOGS/" && log "logs kept in $FERRY_E2E_KEEP_LOGS"
fi

# 1. Kubelets first (so they restart nothing), then the pods through the
# runtime while it still runs: CNI DEL frees their netns and addresses.
for n in $(node_names); do stop "kubelet-$n"; done
for n in $(node_names); do
  if running "containerd-$n"; then
    "$BIN/cri-clean" -endpoint "unix://$(node_sock "$n")" || problem "cri-clean on $n failed"
  fi
done

# 2. Control plane (clients before the apiserver), etcd, the runtimes.
stop kube-controller-manager
stop kube-scheduler
stop kube-apiserver
stop etcd
for n in $(node_names); do stop "containerd-$n"; done

# 3. Whatever of ours still runs (containerd shims, containers that outlived
# their runtime, e.g. when it had died): a shim of one of our runtimes
# (its command line has -address <our socket>), or a process whose cgroup is
# one of our runtimes' tasks (containerd names it /k8s.io/<id>, and <id> has
# a task dir in that runtime's state dir). Not just any command line naming
# the state dir: someone's `tail -f` of a log is not ours (lib.sh's
# runtime_procs). Killed by pid.
left="$(runtime_procs "$NODES_DIR"/*)"
if [ -n "$left" ]; then
  log "killing leftover processes: $(echo $left)"
  # shellcheck disable=SC2086
  kill -KILL $left 2>/dev/null || true
  for p in $left; do
    for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done
  done
fi
# A shim killed above leaves its socket, /run/containerd/s/<sha256 of
# "<runtime socket>/<namespace>/<task id>"> (containerd 1.6): remove ours.
for d in "$NODES_DIR"/*/containerd/state/io.containerd.runtime.v2.task/*/*; do
  [ -d "$d" ] || continue
  n="${d#"$NODES_DIR"/}"
  n="${n%%/*}"
  ns="${d%/*}"
  ns="${ns##*/}"
  sum="$(printf '%s' "$(node_sock "$n")/$ns/${d##*/}" | sha256sum)"
  rm -f "/run/containerd/s/${sum%% *}"
done
rm -rf "$RUN"

# 4. The nodes' pools: only a pool whose single vdev is our image file. The
# daemon can answer "pool is busy" for a moment after the pods' processes
# died; retry for a while. A pool not destroyed keeps its image file (the
# state dir is then kept too).
pools_left=0
for n in $(node_names); do
  pool="$(node_pool "$n")"
  zpool list -H -o name "$pool" >/dev/null 2>&1 || continue
  if ! zpool status "$pool" 2>/dev/null | grep -qF "$STATE/pools/$pool.img"; then
    problem "pool $pool exists but is not backed by $STATE/pools/$pool.img: left alone"
    continue
  fi
  for i in $(seq 1 30); do
    if out="$(zpool destroy -f "$pool" 2>&1)"; then
      log "zfs pool $pool destroyed"
      break
    fi
    ((i == 1)) && log "zpool destroy $pool: $out; retrying"
    sleep 1
  done
  if zpool list -H -o name "$pool" >/dev/null 2>&1; then
    problem "zpool destroy $pool failed: $out"
    pools_left=1
  fi
done

# 5. Mounts under the state dir (pods' volumes, overlay rootfs, shm, the
# rshared bind of the nodes' dir), deepest first.
for _ in 1 2 3; do
  mnts="$(mounts_under "$STATE")"
  [ -n "$mnts" ] || break
  while read -r m; do
    [ -n "$m" ] && umount "$m" 2>/dev/null
  done <<<"$mnts"
done
mnts="$(mounts_under "$STATE")"
if [ -n "$mnts" ]; then
  while read -r m; do umount -l "$m" 2>/dev/null && log "lazily unmounted $m"; done <<<"$mnts"
fi

# 5b. Pod network leftovers when a runtime could not remove its pods (it had
# died): a pod netns is ours if it holds an address of our pod subnets; CNI
# result files are ours by network name (and the loopback ones by the same
# container id).
if [ -d /run/netns ]; then
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    ns="${ns#/run/netns/}"
    if ip -n "$ns" -4 -o addr 2>/dev/null | grep -q " inet $POD_PREFIX\."; then
      ip netns del "$ns" && log "removed orphaned pod netns $ns"
    fi
  done
fi
for f in /var/lib/cni/results/ferry-e2e-*; do
  [ -e "$f" ] || continue
  id="${f#/var/lib/cni/results/ferry-e2e-}"
  id="${id%-*}"
  rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
done

# 6. Network: the nodes' namespaces (their veths and pods' bridges go with
# them; the root-namespace routes go with the bridge), then the bridge.
for n in $(node_names); do
  if [ -e "/run/netns/$n" ]; then
    ip netns del "$n" || problem "ip netns del $n failed"
  fi
  # (gone with the namespace, unless it was never moved there)
  ip link del "$(node_veth "$n")" 2>/dev/null || true
done
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link del "$BRIDGE" || problem "ip link del $BRIDGE failed"
fi

# 7. Files. Never across a mount: if one is left, keep the dir and say so.
if [ -n "$(mounts_under "$STATE")" ]; then
  problem "still mounted, $STATE kept: $(mounts_under "$STATE" | tr '\n' ' ')"
elif ((pools_left)); then
  problem "$STATE kept: a pool's image file is still in use"
elif [ -e "$STATE" ]; then
  rm -rf --one-file-system "$STATE" || problem "rm -rf $STATE failed"
fi
# What the runtimes and the kubelets leave outside it: kubelet log symlinks
# into our pod logs, empty dirs containerd (shim sockets) and CNI (result
# cache) create on demand.
# The kubelet's device-plugin socket has a fixed path outside its root dir
# (/var/lib/kubelet/device-plugins/kubelet.sock); removed if up.sh found no
# /var/lib/kubelet.
if ((owns_var_lib_kubelet)); then
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null
fi
if [ -d /var/log/containers ]; then
  for l in /var/log/containers/*; do
    [ -L "$l" ] && readlink "$l" | grep -q "^$STATE/" && rm -f "$l"
  done
fi
rmdir /var/log/containers /run/containerd/s /run/containerd /var/lib/cni/results /var/lib/cni 2>/dev/null
# `ip netns add` made /run/netns a mount of its own; drop it once no namespace
# is left in it (anyone's).
if [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ]; then
  mountpoint -q /run/netns && umount /run/netns
  rmdir /run/netns
fi

if ((problems > 0)); then
  log "down with $problems problem(s) in $((SECONDS - t0)) s"
  exit 1
fi
log "down in $((SECONDS - t0)) s"
