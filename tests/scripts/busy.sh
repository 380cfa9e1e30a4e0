#!/usr/bin/env bash
# Usage: busy.sh N COMMAND [ARGS...]
#
# Runs COMMAND while N busy loops keep N cores saturated (as on a busy CI
# machine or node), and exits with COMMAND's status. The loops are stopped
# when COMMAND ends, however this script ends: normally, on failure, or on
# SIGINT/SIGTERM/SIGHUP (trap; Ctrl-C reaches COMMAND through the process
# group, and the trap runs once it has ended). Should this script be killed
# with SIGKILL, the loops stop by themselves: each one checks every
# fraction of a second that this script is still alive.
set -uo pipefail

if [ $# -lt 2 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: busy.sh N COMMAND [ARGS...]" >&2
  exit 2
fi
n=$1
shift

self=$$
loops=()
stop_loops() {
  if [ ${#loops[@]} -gt 0 ]; then
    kill "${loops[@]}" 2>/dev/null
    wait "${loops[@]}" 2>/dev/null
    echo "busy.sh: busy loops stopped" >&2
    loops=()
  fi
}
trap stop_loops EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

for ((i = 0; i < n; i++)); do
  # Pure CPU in a subshell, with one liveness check (a syscall) every
  # 100000 iterations.
  (
    trap - EXIT INT TERM HUP
    while kill -0 "$self" 2>/dev/null; do
      for ((j = 0; j < 100000; j++)); do :; done
    done
  ) &
  loops+=($!)
done
echo "busy.sh: $n busy loops running (pids ${loops[*]}) while: $*" >&2

"$@"
code=$?
exit "$code"
