# Shared settings and helpers of the local test cluster's scripts (sourced).
# Every setting can be overridden from the environment.

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=tests/cluster/versions.sh
source "$here/versions.sh"
export PATH="/usr/local/go/bin:$PATH"

# All state lives here; cluster-down removes it.
STATE="${FERRY_E2E_DIR:-/var/lib/ferry-e2e}"
PKI="$STATE/pki"
RUN="$STATE/run"   # pid files
LOGS="$STATE/logs"
NODES_DIR="$STATE/nodes" # kubelet/containerd dirs, bind-mounted rshared
NODE_COUNT="${FERRY_E2E_NODES:-3}"
# The tooling's own test network: a bridge in the root namespace holding the
# control plane's address, one network namespace per node on it, pod subnets
# routed to the nodes. Nothing else is routed anywhere.
BRIDGE="${FERRY_E2E_BRIDGE:-ferrye2e0}"
NET_PREFIX="${FERRY_E2E_NET:-10.213.0}"    # bridge .1, nodes .11, .12, ...
POD_PREFIX="${FERRY_E2E_PODNET:-10.214}"   # node N: 10.214.N.0/24
SERVICE_CIDR="${FERRY_E2E_SERVICES:-10.215.0.0/24}"
SERVICE_IP="${SERVICE_CIDR%.*}.1"
APISERVER_IP="$NET_PREFIX.1"
APISERVER_PORT=6443
ETCD_CLIENT_PORT="${FERRY_E2E_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${FERRY_E2E_ETCD_PEER_PORT:-23800}"
POOL_SIZE="${FERRY_E2E_POOL_SIZE:-8G}" # sparse; room for the e2e suite's 1Gi volumes
KUBECONFIG_FILE="$STATE/kubeconfig"
TOOLS="$FERRY_CACHE/cluster-tools" # certgen, pause, peercert
IMAGES="$FERRY_CACHE/cluster-images"

BIN="$FERRY_K8S_BIN"
KUBECTL="$BIN/kubectl"
# helm, as `make helm` builds it (the Makefile's HELM_VERSION).
HELM="${HELM:-$FERRY_CACHE/tools/helm-v4.3.1/helm}"

# Seconds since the outermost script started (exported to the ones it runs).
FERRY_E2E_T0="${FERRY_E2E_T0:-$(date +%s)}"
export FERRY_E2E_T0
log() { printf "cluster: %4ss  %s\n" "$(($(date +%s) - FERRY_E2E_T0))" "$*" >&2; }
die() { echo "cluster: ERROR: $*" >&2; exit 1; }

node_names() { local i; for ((i = 1; i <= NODE_COUNT; i++)); do echo "node$i"; done; }
node_num() { echo "${1#node}"; }
node_ip() { echo "$NET_PREFIX.$((10 + $(node_num "$1")))"; }
node_pod_cidr() { echo "$POD_PREFIX.$(node_num "$1").0/24"; }
node_dir() { echo "$NODES_DIR/$1"; }
node_pool() { echo "ferry-$1"; }
node_sock() { echo "$(node_dir "$1")/containerd/containerd.sock"; }
node_veth() { echo "fe2e-$1"; } # the root-namespace end of the node's veth

kubectl() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# pid_of NAME: the pid of a process this tooling started, if it still runs.
# A pid is trusted only if the process's command line names the state dir,
# so a recycled pid is never mistaken for ours.
pid_of() {
  local f="$RUN/$1.pid" pid args
  [ -f "$f" ] || return 1
  read -r pid <"$f" || return 1
  [ -n "$pid" ] || return 1
  # Pure bash: a pipeline into grep -q could fail on SIGPIPE under pipefail.
  mapfile -d "" args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  [[ "${args[*]}" == *"$STATE"* ]] || return 1
  echo "$pid"
}
running() { pid_of "$1" >/dev/null; }

# start NAME CMD...: runs CMD in the background in a session of its own
# (outliving make), output to $LOGS/NAME.log, pid in $RUN/NAME.pid.
# setsid and nsenter exec their command, so $! is the process itself.
start() {
  local name="$1"; shift
  if running "$name"; then
    log "$name already running (pid $(pid_of "$name"))"
    return
  fi
  mkdir -p "$RUN" "$LOGS"
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  local pid=$! i
  echo "$pid" >"$RUN/$name.pid"
  # Until the forked shell has exec'd, its command line is this script's,
  # which pid_of does not trust: a wait_for right now would take the
  # process for exited (seen on a loaded machine, with an empty log).
  for ((i = 0; i < 300; i++)); do
    running "$name" && break
    alive "$pid" || break
    sleep 0.05
  done
  log "$name started (pid $pid)"
}

# start_in_node NODE NAME CMD...: the same, inside the node's network namespace.
start_in_node() {
  local node="$1" name="$2"; shift 2
  start "$name" nsenter "--net=/run/netns/$node" "$@"
}

# start_containerd NODE, start_kubelet NODE: the node's runtime and kubelet
# in its network namespace, configured by up.sh (also used by node.sh to
# bring a killed node back).
start_containerd() {
  local d
  d="$(node_dir "$1")"
  start_in_node "$1" "containerd-$1" containerd --config "$d/containerd/config.toml" --address "$(node_sock "$1")"
}
start_kubelet() {
  local d
  d="$(node_dir "$1")"
  start_in_node "$1" "kubelet-$1" "$BIN/kubelet" \
    --config "$d/kubelet-config.yaml" \
    --kubeconfig "$d/kubelet.kubeconfig" \
    --hostname-override "$1" \
    --node-ip "$(node_ip "$1")" \
    --root-dir "$d/kubelet"
}

# runtime_procs NODE_DIR...: the pids of the processes of those nodes'
# runtimes: a shim of one of them (its command line has -address
# <its socket>), or a process whose cgroup is one of their tasks (containerd
# names it /k8s.io/<id>, and <id> has a task dir in that runtime's state
# dir). Pure bash (no grep in a pipeline).
runtime_procs() {
  local p args line d nd
  local -A ids=()
  for nd in "$@"; do
    for d in "$nd"/containerd/state/io.containerd.runtime.v2.task/*/*; do
      [ -d "$d" ] && ids["${d##*/}"]=1
    done
  done
  for p in /proc/[0-9]*; do
    p="${p#/proc/}"
    [ "$p" = "$$" ] && continue
    mapfile -d "" args 2>/dev/null <"/proc/$p/cmdline" || continue
    for nd in "$@"; do
      if [[ "${args[*]}" == *"-address $nd/containerd/containerd.sock"* ]]; then
        echo "$p"
        continue 2
      fi
    done
    read -r line 2>/dev/null <"/proc/$p/cgroup" || continue
    line="${line##*/}"
    [ -n "$line" ] && [ -n "${ids[$line]:-}" ] && echo "$p"
  done
}

# alive PID: the process exists and is not a zombie (ours are reparented to
# pid 1, which may reap them a while later).
alive() {
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat="${stat##*) }"
  [ "${stat%% *}" != Z ]
}

# stop NAME [TIMEOUT]: SIGTERM, wait for the exit, SIGKILL after TIMEOUT s.
stop() {
  local name="$1" timeout="${2:-20}" pid i
  if pid="$(pid_of "$name")"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      log "$name (pid $pid) ignored SIGTERM for ${timeout}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while alive "$pid"; do sleep 0.1; done
    fi
    log "$name stopped"
  fi
  rm -f "$RUN/$name.pid"
}

# wait_for DESC TIMEOUT PROC CMD...: polls CMD until it succeeds; fails at
# once (with the log's tail) if process PROC (a pid-file name, or -) exits.
wait_for() {
  local desc="$1" timeout="$2" proc="$3"; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ "$proc" != - ] && ! running "$proc"; then
      tail -n 30 "$LOGS/$proc.log" >&2 || true
      die "$proc exited while waiting for $desc (log: $LOGS/$proc.log)"
    fi
    if ((SECONDS >= deadline)); then
      [ "$proc" = - ] || tail -n 30 "$LOGS/$proc.log" >&2 || true
      die "timed out after ${timeout}s waiting for $desc"
    fi
    sleep 0.2
  done
}

# mounts_under DIR: mount points at or below DIR, deepest first.
mounts_under() {
  findmnt -rn -o TARGET | awk -v d="$1" '$0 == d || index($0, d "/") == 1' |
    awk '{ print gsub("/", "/"), $0 }' | sort -rn -k1,1 | cut -d' ' -f2- | uniq
}
