#!/usr/bin/env bash
# Node faults on the running local cluster, for the node-loss tests:
#   node.sh kill NODE     power loss: the node's network cut, then its kubelet,
#                         containerd, shims and every container SIGKILLed
#                         (its zfs pool stays: zfs-fuse serves every node)
#   node.sh cut NODE      the node's network cut (veth down): it reaches
#                         neither the API server nor the other nodes, and
#                         everything on it keeps running
#   node.sh pause NODE    a stalled machine: its kubelet, containerd, shims
#                         and every container process SIGSTOPped (their pids
#                         and start times in $RUN/paused-NODE); the network
#                         stays up
#   node.sh pause-daemon NODE  only Ferry's node daemon on NODE SIGSTOPped (a
#                         crash loop, an upgrade waiting for its image): the
#                         kubelet, the pods and the volume managers run on;
#                         listed in $RUN/paused-NODE like pause's
#   node.sh resume NODE [AT]  SIGCONT to exactly the processes pause
#                         stopped; with AT (unix time, ns), the processes
#                         found first and the signal sent at AT, so that a
#                         pause ends when the test means it to, whatever
#                         this script's own start-up costs a loaded machine
#   node.sh isolate NODE  the node and its pods lose the API server (their
#                         packets to it dropped), the other nodes still reach
#                         it and it them
#   node.sh restore NODE  a paused node resumed, an isolated one's rules
#                         removed, network back, runtime and kubelet started
#                         again if they are not running; waits until the
#                         node is Ready
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

[ "$(id -u)" = 0 ] || die "run as root"
usage="usage: node.sh kill|cut|pause|pause-daemon|resume|isolate|restore NODE, node.sh resume NODE [AT]"
[ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$1" = resume ] && [[ "$3" =~ ^[0-9]+$ ]]; } || die "$usage"
cmd="$1" n="$2" at="${3:-}"
[ -e "/run/netns/$n" ] || die "no node $n (no network namespace /run/netns/$n)"
veth="$(node_veth "$n")"
paused="$RUN/paused-$n"

# start_time PID: the process's start time (field 22 of /proc/PID/stat), so
# that a pid recorded by pause is never mistaken for a later process.
start_time() {
  local stat f
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat="${stat##*) }" # past the command name, which may hold spaces
  read -ra f <<<"$stat"
  echo "${f[19]}"
}

# resume_paused [AT]: SIGCONT, in one kill, to every process pause stopped
# that still is the process it stopped, at AT (unix ns) if given; forgets
# the record.
resume_paused() {
  local pid st pids=() wait_ns
  [ -f "$paused" ] || return 0
  while read -r pid st; do
    [ "$(start_time "$pid" 2>/dev/null)" = "$st" ] && pids+=("$pid")
  done <"$paused"
  if [ -n "${1:-}" ]; then
    wait_ns=$(($1 - $(date +%s%N)))
    if [ "$wait_ns" -gt 0 ]; then sleep "$(printf '%d.%09d' $((wait_ns / 1000000000)) $((wait_ns % 1000000000)))"; fi
  fi
  # The instant the processes continue (a test measures from it, not from
  # when it ran this script).
  local cont_ns
  cont_ns=$(date +%s%N)
  if [ ${#pids[@]} -gt 0 ]; then kill -CONT "${pids[@]}" 2>/dev/null || true; fi
  rm -f "$paused"
  log "node $n resumed at $cont_ns (${#pids[@]} processes)"
}

# The API server's address and port, dropped for the node itself (OUTPUT:
# its kubelet) and its pods (FORWARD: also the kubernetes service, DNAT'd to
# it before filtering).
isolate_rule=(-d "$APISERVER_IP/32" -p tcp --dport "$APISERVER_PORT" -j DROP)
in_node() { nsenter --net="/run/netns/$n" "$@"; }

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
pause)
  [ -f "$paused" ] && die "node $n is paused already ($paused)"
  # The kubelet and the runtime first (they start nothing more), then the
  # shims and container processes, swept again until no new one shows up
  # (a container may fork between the listing and the stop).
  declare -A stopped=()
  : >"$paused.tmp"
  stop_pids() {
    local p st
    for p in "$@"; do
      [ -n "${stopped[$p]:-}" ] && continue
      st="$(start_time "$p")" || continue
      kill -STOP "$p" 2>/dev/null || continue
      stopped[$p]=1
      echo "$p $st" >>"$paused.tmp"
    done
  }
  pids=()
  for name in "kubelet-$n" "containerd-$n"; do
    if pid="$(pid_of "$name")"; then pids+=("$pid"); fi
  done
  stop_pids "${pids[@]}"
  for _ in $(seq 1 20); do
    before=${#stopped[@]}
    mapfile -t more < <(runtime_procs "$(node_dir "$n")")
    [ ${#more[@]} -gt 0 ] && stop_pids "${more[@]}"
    [ ${#stopped[@]} -eq "$before" ] && break
  done
  mv "$paused.tmp" "$paused"
  log "node $n paused (${#stopped[@]} processes, listed in $paused)"
  ;;
pause-daemon)
  [ -f "$paused" ] && die "node $n is paused already ($paused)"
  : >"$paused.tmp"
  count=0
  mapfile -t procs < <(runtime_procs "$(node_dir "$n")")
  for p in "${procs[@]}"; do
    mapfile -d "" args 2>/dev/null <"/proc/$p/cmdline" || continue
    [ "${#args[@]}" -ge 2 ] && [ "${args[0]##*/}" = ferry ] && [ "${args[1]}" = daemon ] || continue
    st="$(start_time "$p")" || continue
    kill -STOP "$p" 2>/dev/null || continue
    echo "$p $st" >>"$paused.tmp"
    count=$((count + 1))
  done
  [ "$count" -gt 0 ] || { rm -f "$paused.tmp"; die "no ferry daemon runs on node $n"; }
  mv "$paused.tmp" "$paused"
  log "node $n: its ferry daemon paused ($count processes, listed in $paused)"
  ;;
resume)
  [ -f "$paused" ] || die "node $n is not paused (no $paused)"
  resume_paused "$at"
  ;;
isolate)
  for chain in OUTPUT FORWARD; do
    in_node iptables -C "$chain" "${isolate_rule[@]}" 2>/dev/null ||
      in_node iptables -I "$chain" 1 "${isolate_rule[@]}"
  done
  log "node $n isolated from the API server"
  ;;
restore)
  resume_paused
  for chain in OUTPUT FORWARD; do
    while in_node iptables -D "$chain" "${isolate_rule[@]}" 2>/dev/null; do :; done
  done
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
  die "$usage"
  ;;
esac
