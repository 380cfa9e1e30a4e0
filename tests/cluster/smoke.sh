#!/usr/bin/env bash
# Smoke check of a running local test cluster (make cluster-up):
#  - one pod per node from ferry-test:dev (never pulled), each Running;
#  - kubectl exec and kubectl logs on every one (the apiserver reaches each
#    kubelet in its namespace), a pod reaching the apiserver's address and a
#    pod on another node;
#  - the ferry image runs, and its zpool reaches the host's zfs daemon;
#  - a ReplicaSet of 3 with required pod anti-affinity on 3 distinct nodes;
#  - everything deleted again.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

[ -f "$KUBECONFIG_FILE" ] || die "no cluster ($KUBECONFIG_FILE missing): make cluster-up"
t0=$SECONDS
ns=ferry-smoke
fail() { echo "cluster-smoke: FAIL: $*" >&2; kubectl -n "$ns" get pods -o wide >&2 || true; exit 1; }
pass() { echo "cluster-smoke: ok: $*"; }

cleanup() { kubectl delete namespace "$ns" --ignore-not-found --wait=true --timeout=120s >/dev/null || true; }
trap cleanup EXIT
cleanup
kubectl create namespace "$ns" >/dev/null
# The default service account is created by the controller-manager; pods
# are refused until it exists.
wait_for "service account $ns/default" 60 - kubectl -n "$ns" get serviceaccount default

# A shell that exits on SIGTERM (it is pid 1: no default handler) and says hello.
pod_script='trap "exit 0" TERM; echo "hello from $(hostname) on $NODE_NAME"; while true; do sleep 1; done'

nodes=($(node_names))
for n in "${nodes[@]}"; do
  kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: smoke-$n
spec:
  nodeSelector: {kubernetes.io/hostname: $n}
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: ferry-test:dev
    imagePullPolicy: Never
    command: [sh, -c, '$pod_script']
    env:
    - name: NODE_NAME
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
EOF
done
kubectl -n "$ns" wait --for=condition=Ready pod --all --timeout=120s >/dev/null ||
  fail "pods did not become Ready"
for n in "${nodes[@]}"; do
  node="$(kubectl -n "$ns" get pod "smoke-$n" -o jsonpath='{.spec.nodeName}')"
  [ "$node" = "$n" ] || fail "smoke-$n runs on $node"
done
pass "one pod Running on each of ${nodes[*]}"

for n in "${nodes[@]}"; do
  out="$(kubectl -n "$ns" exec "smoke-$n" -- sh -c 'echo exec-ok $NODE_NAME')" || fail "kubectl exec on $n"
  [ "$out" = "exec-ok $n" ] || fail "kubectl exec on $n said: $out"
  wait_for "logs of smoke-$n" 30 - sh -c "'$KUBECTL' --kubeconfig '$KUBECONFIG_FILE' -n $ns logs smoke-$n | grep -q 'hello from smoke-$n on $n'" ||
    fail "kubectl logs on $n"
done
pass "kubectl exec and kubectl logs reach the kubelet of every node"

# Pod networking stays on our own addresses: a pod reaches the apiserver's
# port on the bridge, and a pod on another node.
# (Plain HTTP to the TLS port: the apiserver answers 400, which proves the
# round trip. busybox has no TLS client, and its static wget crashes.)
out="$(kubectl -n "$ns" exec smoke-node1 -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $APISERVER_IP $APISERVER_PORT" 2>&1 || true)"
[[ "$out" == *"400 Bad Request"* ]] || fail "pod on node1 cannot reach the apiserver at $APISERVER_IP:$APISERVER_PORT: $out"
# In-cluster clients dial the kubernetes service (DNAT'd in each node).
for n in "${nodes[@]}"; do
  out="$(kubectl -n "$ns" exec "smoke-$n" -- sh -c 'printf "GET / HTTP/1.0\r\n\r\n" | nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT' 2>&1 || true)"
  [[ "$out" == *"400 Bad Request"* ]] || fail "pod on $n cannot reach the apiserver's service address: $out"
done
ip2="$(kubectl -n "$ns" get pod smoke-node2 -o jsonpath='{.status.podIP}')"
kubectl -n "$ns" exec smoke-node1 -- ping -c 1 -W 5 "$ip2" >/dev/null ||
  fail "pod on node1 cannot reach the pod on node2 ($ip2)"
pass "pods reach the apiserver ($APISERVER_IP:$APISERVER_PORT, and as the kubernetes service from every node) and a pod on another node ($ip2)"

kubectl -n "$ns" delete pod --all --wait=true --timeout=60s >/dev/null || fail "pods were not deleted"
pass "pods deleted"

# The ferry image: its binary runs, and its zpool reaches the host's zfs
# daemon through the socket directory.
kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: smoke-ferry-image
spec:
  nodeSelector: {kubernetes.io/hostname: node1}
  restartPolicy: Never
  initContainers:
  - name: ferry
    image: ghcr.io/ferry-csi/ferry:dev
    imagePullPolicy: Never
    args: [version]
  containers:
  - name: zpool
    image: ghcr.io/ferry-csi/ferry:dev
    imagePullPolicy: Never
    command: [zpool, list, -H, -o, name, $(node_pool node1)]
    volumeMounts:
    - {name: zfs-socket, mountPath: /var/run/zfs}
  volumes:
  - name: zfs-socket
    hostPath: {path: /var/run/zfs, type: Directory}
EOF
kubectl -n "$ns" wait --for=jsonpath='{.status.phase}'=Succeeded pod/smoke-ferry-image --timeout=60s >/dev/null ||
  fail "the ferry image's pod did not succeed: $(kubectl -n "$ns" logs smoke-ferry-image --all-containers 2>&1)"
out="$(kubectl -n "$ns" logs smoke-ferry-image -c zpool)"
[ "$out" = "$(node_pool node1)" ] || fail "zpool in the ferry image said: $out"
pass "the ferry image runs ferry, and its zpool sees the node's pool $(node_pool node1) through /var/run/zfs"
kubectl -n "$ns" delete pod smoke-ferry-image --wait=true --timeout=60s >/dev/null

kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: spread
spec:
  replicas: $NODE_COUNT
  selector:
    matchLabels: {app: spread}
  template:
    metadata:
      labels: {app: spread}
    spec:
      terminationGracePeriodSeconds: 5
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels: {app: spread}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: main
        image: ferry-test:dev
        imagePullPolicy: Never
        command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
EOF
rs_ready() { [ "$(kubectl -n "$ns" get rs spread -o jsonpath='{.status.readyReplicas}')" = "$NODE_COUNT" ]; }
wait_for "ReplicaSet spread ready" 120 - rs_ready || fail "ReplicaSet did not become ready"
spread="$(kubectl -n "$ns" get pods -l app=spread -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | tr '\n' ' ')"
[ "$(echo "$spread" | wc -w)" = "$NODE_COUNT" ] || fail "ReplicaSet pods on: $spread"
pass "ReplicaSet of $NODE_COUNT with required anti-affinity on distinct nodes: $spread"

kubectl -n "$ns" delete rs spread --wait=true --timeout=60s >/dev/null || fail "ReplicaSet not deleted"
kubectl -n "$ns" wait --for=delete pod -l app=spread --timeout=60s >/dev/null 2>&1 || true
[ -z "$(kubectl -n "$ns" get pods -o name)" ] || fail "pods left after deleting the ReplicaSet"
pass "ReplicaSet and its pods deleted"
trap - EXIT
cleanup
echo "cluster-smoke: PASS in $((SECONDS - t0)) s"
