#!/usr/bin/env bash
# Node faults on the running local cluster, for the node-loss tests:
#   node.sh kill NODE     power loss: the node's network cut, then its kubelet,
#                         containerd, shims and every container SIGKILLed
#                         (its zfs pool stays: zfs-fuse serves every node)
#   node.sh cut NODE      the node's network cut (veth down): it reaches
#                         neither the API server nor the other nodes, and
#                         everything on it keeps running
#   node.sh restore NODE  network back, runtime and kubelet started again if
#                         they are not running; waits until the node is Ready
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

[ "$(id -u)" = 0 ] || die "run as root"
[ $# -eq 2 ] || die "usage: node.sh kill|cut|restore NODE"
cmd="$1" n="$2"
[ -e "/run/netns/$n" ] || die "no node $n (no network namespace /run/netns/$n)"
veth="$(node_veth "$n")"

case "$cmd" in
cut)
  ip link set "$veth" down
  ;;
kill)
  ip link set "$veth" down
  pids=()
  for name in "kubelet-$n" "containerd-$n"; do
    if pid="$(pid_of "$name")"; then pids+=("$pid"); fi
  done
  mapfile -t more < <(runtime_procs "$(node_dir "$n")")
  pids+=("${more[@]}")
  [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[@]}" 2>/dev/null || true
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done
  done
  # A node that lost power runs nothing: anything its runtime started since
  # the first sweep (none expected, the runtime is dead) is swept again.
  mapfile -t more < <(runtime_procs "$(node_dir "$n")")
  [ ${#more[@]} -gt 0 ] && kill -KILL "${more[@]}" 2>/dev/null || true
  # The killed shims' sockets (see down.sh).
  for d in "$(node_dir "$n")"/containerd/state/io.containerd.runtime.v2.task/*/*; do
    [ -d "$d" ] || continue
    ns="${d%/*}"
    ns="${ns##*/}"
    sum="$(printf '%s' "$(node_sock "$n")/$ns/${d##*/}" | sha256sum)"
    rm -f "/run/containerd/s/${sum%% *}"
  done
  log "node $n killed (${#pids[@]} processes)"
  ;;
restore)
  ip link set "$veth" up
  if ! running "containerd-$n"; then
    start_containerd "$n"
    wait_for "containerd of $n" 60 "containerd-$n" ctr --address "$(node_sock "$n")" version
  fi
  running "kubelet-$n" || start_kubelet "$n"
  node_ready() { [ "$(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
  wait_for "node $n Ready" 180 "kubelet-$n" node_ready "$n"
  log "node $n restored"
  ;;
*)
  die "usage: node.sh kill|cut|restore NODE"
  ;;
esac
