#!/usr/bin/env bash
# Runs the Kubernetes project's External Storage tests (e2e.test of v1.37.2)
# against Ferry on the running local cluster (tests/cluster), with the driver
# defined by tests/e2e/testdriver.yaml. Brings nothing up: it checks that the
# cluster and Ferry are there and says what to run if not.
#
#   tests/e2e/run.sh            check, import the test images, run, print ginkgo's summary
#   tests/e2e/run.sh --dry-run  list the selected specs (no cluster needed)
#
# Settings (environment):
#   E2E_PROCS     parallel ginkgo processes (default 2; 1 runs serially)
#   E2E_SLOW      1: also run the [Slow] specs (default 1)
#   E2E_FOCUS     replaces the focus regex (default: the chosen suites below)
#   E2E_SKIP      added to the skip regex
#   E2E_TIMEOUT   ginkgo's suite timeout (default 3h)
#   E2E_CLIENT_NODE the node every test pod runs on (default the first node)
#   E2E_ARTIFACTS where the log, the spec list and the reports go (JUnit; JSON
#                 with every spec's output, the passed ones' too)
#                 (default /tmp/ferry-e2e-k8s-suite; kept after cluster-down)
set -euo pipefail
e2e="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$e2e/../cluster/lib.sh"
log() { printf "e2e-k8s-suite: %s\n" "$*" >&2; }
die() { echo "e2e-k8s-suite: ERROR: $*" >&2; exit 1; }

DRIVER=ferry.zfs.csi.io
DRY_RUN=false
[ "${1:-}" = --dry-run ] && DRY_RUN=true
PROCS="${E2E_PROCS:-2}"
ARTIFACTS="${E2E_ARTIFACTS:-/tmp/ferry-e2e-k8s-suite}"

# What runs: the External Storage tests of these suites for Ferry's driver
# (every test pattern; those the driver does not support skip at run time).
SUITES='provisioning|volumes|volumeIO|volume-expand|snapshottable|multiVolume|subPath|volumeMode|read-write-once-pod|capacity'
FOCUS="${E2E_FOCUS:-External.Storage \[Driver: ${DRIVER//./\\.}\] .*\] ($SUITES) }"
# What does not (reasons in tests/e2e/README.md):
#  - the serial and disruptive sets, and flaky tests;
#  - every [Feature:...] but the snapshots' own (label filter below);
#  - test patterns Ferry has no use for: raw block volumes, pre-provisioned
#    PVs and CSI inline volumes (the driver file offers neither; they would
#    skip at run time, this keeps them out of the list), xfs/ext4/ntfs
#    filesystems (SupportedFsType is the default only);
SKIP='\[Serial\]|\[Disruptive\]|\[Flaky\]'
SKIP+='|\(block volmode\)|\[Testpattern: Pre-provisioned PV|\[Testpattern: Inline-volume|\[Testpattern: CSI Ephemeral-volume'
SKIP+='|\((xfs|ext3|ext4|ntfs)\)'
#  - environment limits of the local cluster: volumeMode's "should not mount /
#    map unused volumes" inspects the node through HostExec, which nsenters
#    PID 1's mount namespace (refused in this sandbox, even to root) and
#    reads /var/lib/kubelet/pods (each test kubelet has a root dir of its own);
SKIP+='|volumeMode should not mount / map unused volumes in a pod'
#  - a limit of distributed snapshotting: the Pre-provisioned Snapshot
#    patterns create a VolumeSnapshotContent without the
#    snapshot.storage.kubernetes.io/managed-by label, and csi-snapshotter
#    --node-deployment reconciles only contents labelled with its node.
#    (provisioning's "restoring snapshot to larger size pvc", whose pod the
#    scheduler may put on a node without the snapshot, runs: the restore
#    fetches it from the node that holds it.)
SKIP+='|\[Testpattern: Pre-provisioned Snapshot'
[ "${E2E_SLOW:-1}" = 1 ] || SKIP+='|\[Slow\]'
[ -z "${E2E_SKIP:-}" ] || SKIP+="|$E2E_SKIP"
LABELS='!Serial && !Disruptive && !Flaky && Feature: isSubsetOf {VolumeSnapshotDataSource}'

"$e2e/build.sh"
E2E_TEST="$BIN/e2e.test"
GINKGO="$BIN/ginkgo"
mkdir -p "$ARTIFACTS"
# The driver file names its StorageClass and VolumeSnapshotClass files
# relative to this repository; e2e.test reads the snapshot class relative to
# its working directory (ginkgo runs it in the binary's), so it gets a copy
# with absolute paths.
DRIVER_FILE="$ARTIFACTS/testdriver.yaml"
sed "s#^\([[:space:]]*FromFile:[[:space:]]*\)tests/#\1$repo/tests/#" "$e2e/testdriver.yaml" >"$DRIVER_FILE"
# Every test pod runs on one node (ClientNodeName), as the e2e framework's
# own csi-hostpath driver does: a snapshot lives in its volume's pool, and a
# volume restored from it is created on the node the scheduler picks for the
# restoring pod, which knows nothing of where the snapshot is (clones are
# placed by the provisioning suite's topology handling, snapshot restores
# are not). E2E_CLIENT_NODE names the node; default the first one.
client_node="${E2E_CLIENT_NODE:-}"
if [ -z "$client_node" ] && ! $DRY_RUN; then
  client_node="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)"
fi
[ -z "$client_node" ] || echo "ClientNodeName: $client_node" >>"$DRIVER_FILE"

e2e_flags=(
  -storage.testdriver="$DRIVER_FILE"
  -repo-root="$repo"
  -kubeconfig="$KUBECONFIG_FILE"
  # kubectl exec in the tests: the cluster's own, never whatever kubectl is on PATH
  -kubectl-path="$KUBECTL"
  -report-dir="$ARTIFACTS"
  # the local cluster runs no pods in kube-system: nothing to wait for
  -minStartupPods=0
)

if $DRY_RUN; then
  list="$ARTIFACTS/specs.txt"
  "$E2E_TEST" -ginkgo.dry-run -ginkgo.v -ginkgo.no-color \
    -ginkgo.focus="$FOCUS" -ginkgo.skip="$SKIP" -ginkgo.label-filter="$LABELS" \
    -storage.testdriver="$DRIVER_FILE" -repo-root="$repo" -report-dir="$ARTIFACTS" \
    >"$ARTIFACTS/dry-run.log" 2>&1 || { tail -n 30 "$ARTIFACTS/dry-run.log" >&2; die "dry run failed"; }
  # ginkgo -v prints each selected spec's full text on a line of its own
  grep '^External Storage' "$ARTIFACTS/dry-run.log" | sort >"$list" || true
  grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$ARTIFACTS/dry-run.log" >&2 || true
  log "$(wc -l <"$list") specs selected; the list: $list"
  exit 0
fi

# The cluster and Ferry must be there; say what to run if not.
[ -f "$KUBECONFIG_FILE" ] || die "no cluster: $KUBECONFIG_FILE is missing (make cluster-up, then make cluster-deploy)"
kubectl get --raw /readyz >/dev/null 2>&1 || die "the cluster's apiserver does not answer (make cluster-up)"
notready="$(kubectl get nodes --no-headers 2>/dev/null | awk '$2 != "Ready" { print $1 }')"
[ -z "$notready" ] || die "nodes not Ready: $notready (make cluster-up)"
nodes="$(kubectl get nodes -o name | sed 's|^node/||')"
[ -n "$nodes" ] || die "the cluster has no nodes (make cluster-up)"
kubectl get csidriver "$DRIVER" >/dev/null 2>&1 || die "Ferry is not deployed: no CSIDriver $DRIVER (make cluster-deploy)"
for n in $nodes; do
  kubectl get csinode "$n" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null | grep -qw "$DRIVER" ||
    die "Ferry is not registered with the kubelet of $n: CSINode $n lists no $DRIVER (is the ferry pod on $n running? kubectl get pods -A -o wide)"
done
kubectl get crd volumesnapshotclasses.snapshot.storage.k8s.io volumesnapshots.snapshot.storage.k8s.io \
  volumesnapshotcontents.snapshot.storage.k8s.io >/dev/null 2>&1 ||
  die "the VolumeSnapshot CRDs are missing (make cluster-deploy)"
kubectl get pods -A --no-headers 2>/dev/null | awk '$2 ~ /snapshot-controller/ && $4 == "Running"' | grep -q . ||
  die "no snapshot-controller pod is Running (make cluster-deploy; kubectl get pods -A)"
# Replica pods of a volume deleted just before (the demo's, say) may still
# be Terminating while their copies are destroyed: wait for them to go (up
# to 3 minutes, looking every second); any other state is an error.
ferry_not_running() { kubectl get pods -A --no-headers 2>/dev/null | awk '$2 ~ /ferry/ && $4 != "Running" { print $1 "/" $2 " " $4 }'; }
for _ in $(seq 1 180); do
  bad="$(ferry_not_running)"
  echo "$bad" | grep -qv ' Terminating$' && break
  [ -z "$bad" ] && break
  sleep 1
done
[ -z "$bad" ] || die "Ferry pods not Running: $bad"
# Every volume reserves its size in its node's pool (refreservation), and
# volume-expand's volumes are 1Gi growing by 64Mi: two such tests on one node
# (2 processes) and the others' volumes do not fit in 2G pools.
min_pool=$((${E2E_MIN_POOL_GIB:-4} << 30))
for n in $nodes; do
  img="$STATE/pools/$(node_pool "$n").img"
  size="$(stat -c %s "$img" 2>/dev/null || echo 0)"
  ((size >= min_pool)) || die "the pool of $n ($img) is $((size >> 20)) MiB, less than ${E2E_MIN_POOL_GIB:-4} GiB: bring the cluster up again with larger pools (make cluster-down; FERRY_E2E_POOL_SIZE=8G make cluster-up cluster-deploy)"
done
log "cluster: nodes $(echo $nodes); Ferry registered on every node; snapshot CRDs and controller present"

"$e2e/images.sh"

log "running: $PROCS process(es), artifacts in $ARTIFACTS"
start=$SECONDS
set +e
"$GINKGO" --procs="$PROCS" --no-color --timeout="${E2E_TIMEOUT:-3h}" \
  --focus="$FOCUS" --skip="$SKIP" --label-filter="$LABELS" \
  --output-dir="$ARTIFACTS" --junit-report=junit.xml --json-report=report.json \
  "$E2E_TEST" -- "${e2e_flags[@]}" 2>&1 | tee "$ARTIFACTS/run.log"
rc=${PIPESTATUS[0]}
set -e
log "finished in $((SECONDS - start)) s (exit $rc); log: $ARTIFACTS/run.log, JUnit: $ARTIFACTS/junit.xml"
# ginkgo's summary, again, at the end
grep -E '^(Ran [0-9]+ of [0-9]+ Specs|SUCCESS!|FAIL!|Test Suite (Passed|Failed))' "$ARTIFACTS/run.log" || true
grep -E '^\s*\[FAIL\]' "$ARTIFACTS/run.log" | sort -u || true
exit "$rc"
