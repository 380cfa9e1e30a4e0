#!/usr/bin/env bash
# Brings up the local test cluster: etcd, kube-apiserver, kube-controller-
# manager and kube-scheduler on the root namespace's bridge address, and
# NODE_COUNT nodes, each a network namespace with its own containerd, kubelet
# and zfs-fuse pool. Idempotent: what already runs is kept, what is missing is
# started. Waits until every node is Ready. Undo with down.sh.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

[ "$(id -u)" = 0 ] || die "run as root (network namespaces, mounts, zfs)"
t0=$SECONDS
on_exit() {
  local rc=$?
  if ((rc != 0)); then
    echo "cluster-up failed (exit $rc). Logs: $LOGS/. What was started stays up;" \
      "run cluster-up again after a fix, or make cluster-down to remove it all." >&2
  fi
}
trap on_exit EXIT

"$here/install-deps.sh"
"$here/build-bins.sh"
"$repo/tests/scripts/zfs-up.sh"
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl cri-clean; do
  [ -x "$BIN/$b" ] || die "$BIN/$b is missing (make cluster-bins)"
done

mkdir -p "$STATE" "$RUN" "$LOGS" "$NODES_DIR" "$STATE/pools" "$STATE/zfs"
chmod 700 "$STATE"

# --- tools (certgen, pause) from this repo --------------------------------
mkdir -p "$TOOLS"
(cd "$repo" && CGO_ENABLED=0 nice -n 15 go build -o "$TOOLS/" ./tests/cluster/certgen ./tests/cluster/pause)

# --- certificates and kubeconfigs -----------------------------------------
node_args=()
for n in $(node_names); do node_args+=(-node "$n=$(node_ip "$n")"); done
"$TOOLS/certgen" -dir "$PKI" -apiserver-ip "$APISERVER_IP" -service-ip "$SERVICE_IP" "${node_args[@]}"

# write_kubeconfig FILE CERT_BASENAME: a kubeconfig for the apiserver with
# that client certificate (data embedded: the file stands alone).
write_kubeconfig() {
  local file="$1" base="$PKI/$2"
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ferry-e2e
  cluster:
    server: https://$APISERVER_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$base.crt")
    client-key-data: $(base64 -w0 "$base.key")
contexts:
- name: ferry-e2e
  context: {cluster: ferry-e2e, user: $2}
current-context: ferry-e2e
EOF
  chmod 600 "$file.tmp"
  mv "$file.tmp" "$file"
}
write_kubeconfig "$KUBECONFIG_FILE" admin
write_kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
write_kubeconfig "$STATE/scheduler.kubeconfig" scheduler
for n in $(node_names); do
  mkdir -p "$(node_dir "$n")"
  write_kubeconfig "$(node_dir "$n")/kubelet.kubeconfig" "kubelet-$n-client"
done
# Pods get this resolver, never the host's (no traffic to addresses not ours).
echo "nameserver 127.0.0.1" >"$STATE/resolv.conf"

# --- network: bridge, one namespace per node ------------------------------
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
  ip addr add "$APISERVER_IP/24" dev "$BRIDGE"
  log "bridge $BRIDGE ($APISERVER_IP/24) created"
fi
ip link set "$BRIDGE" up
for n in $(node_names); do
  veth="$(node_veth "$n")"
  if [ ! -e "/run/netns/$n" ]; then
    ip netns add "$n"
    log "network namespace $n created"
  fi
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$n"
    ip -n "$n" addr add "$(node_ip "$n")/24" dev eth0
    log "veth $veth <-> $n/eth0 ($(node_ip "$n")) created"
  fi
  ip link set "$veth" master "$BRIDGE" up
  ip -n "$n" link set lo up
  ip -n "$n" link set eth0 up
  # Pod traffic: forwarded by the node between its pods' bridge (cni0) and eth0.
  nsenter --net="/run/netns/$n" sysctl -qw net.ipv4.ip_forward=1
  # No kube-proxy: the one service pods need, the apiserver's
  # (KUBERNETES_SERVICE_HOST:443, what in-cluster clients dial), is DNAT'd in
  # the node's namespace to the apiserver. Nothing in the root namespace.
  for chain in PREROUTING OUTPUT; do
    rule=(-d "$SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "$APISERVER_IP:$APISERVER_PORT")
    nsenter --net="/run/netns/$n" iptables -t nat -C "$chain" "${rule[@]}" 2>/dev/null ||
      nsenter --net="/run/netns/$n" iptables -t nat -A "$chain" "${rule[@]}"
  done
  # Replies to pods from the root namespace (apiserver) go to their node.
  ip route replace "$(node_pod_cidr "$n")" via "$(node_ip "$n")" dev "$BRIDGE"
  # Pods of other nodes are reached through those nodes (no default route).
  for m in $(node_names); do
    [ "$m" = "$n" ] && continue
    ip -n "$n" route replace "$(node_pod_cidr "$m")" via "$(node_ip "$m")" dev eth0
  done
done

# --- shared mount propagation for the kubelets' dirs and the datasets ----
# (the node pod mounts both, Bidirectional, which
# needs a shared mount so that a dataset mounted later reaches it)
for d in "$NODES_DIR" "$STATE/zfs"; do
  if ! mountpoint -q "$d"; then
    mount --bind "$d" "$d"
  fi
  mount --make-rshared "$d"
done

# --- zfs pools, one per node ----------------------------------------------
for n in $(node_names); do
  pool="$(node_pool "$n")" img="$STATE/pools/$(node_pool "$n").img"
  if health="$(zpool list -H -o health "$pool" 2>/dev/null)"; then
    [ "$health" = ONLINE ] && continue
    # A pool of an earlier run whose image went (zfs-fuse restarted after
    # a cluster-down): it holds nothing; made anew.
    zpool destroy -f "$pool" || die "zfs pool $pool is $health and cannot be destroyed"
    log "zfs pool $pool was $health: destroyed"
  fi
  truncate -s "$POOL_SIZE" "$img"
  zpool create -f -m "$STATE/zfs/$pool" "$pool" "$img"
  log "zfs pool $pool created ($POOL_SIZE sparse file $img)"
done

# --- containerd per node --------------------------------------------------
for n in $(node_names); do
  d="$(node_dir "$n")"
  mkdir -p "$d/containerd/root" "$d/containerd/state" "$d/containerd/opt" "$d/runc" \
    "$d/cni/net.d" "$d/cni/ipam" "$d/kubelet" "$d/pod-logs" "$d/volume-plugins"
  # Debian's default config, changed where a node must differ or the sandbox
  # needs it (see ../shared/ENVIRONMENT.md and tests/cluster/README.md).
  containerd config default |
    sed -e "s#^root = .*#root = \"$d/containerd/root\"#" \
      -e "s#^state = .*#state = \"$d/containerd/state\"#" \
      -e "s#restrict_oom_score_adj = false#restrict_oom_score_adj = true#" \
      -e "s#bin_dir = \"/opt/cni/bin\"#bin_dir = \"/usr/lib/cni\"#" \
      -e "s#conf_dir = \"/etc/cni/net.d\"#conf_dir = \"$d/cni/net.d\"#" \
      -e "s#sandbox_image = .*#sandbox_image = \"registry.k8s.io/pause:3.6\"#" \
      -e "s#^\( *\)Root = \"\"#\1Root = \"$d/runc\"#" \
      -e "s#path = \"/opt/containerd\"#path = \"$d/containerd/opt\"#" \
      >"$d/containerd/config.toml"
  grep -q "Root = \"$d/runc\"" "$d/containerd/config.toml" || die "containerd config: runc Root not set"
  grep -q "restrict_oom_score_adj = true" "$d/containerd/config.toml" || die "containerd config: restrict_oom_score_adj not set"
  cat >"$d/cni/net.d/10-ferry-e2e.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "ferry-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$(node_pod_cidr "$n")"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$d/cni/ipam"
      }
    }
  ]
}
EOF
  start_containerd "$n"
done
for n in $(node_names); do
  wait_for "containerd of $n" 60 "containerd-$n" ctr --address "$(node_sock "$n")" version
done

# --- images ------------------------------------------------------------------
"$here/images.sh"

# --- control plane --------------------------------------------------------
start etcd "$BIN/etcd" --name ferry-e2e --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "ferry-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
  --quota-backend-bytes 2147483648
wait_for etcd 60 etcd curl -sf "http://127.0.0.1:$ETCD_CLIENT_PORT/readyz"

start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --bind-address "$APISERVER_IP" --advertise-address "$APISERVER_IP" --secure-port "$APISERVER_PORT" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$PKI/ca.crt" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-key-file "$PKI/sa.pub" \
  --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
  --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User \
  --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
  --proxy-client-key-file "$PKI/front-proxy-client.key" \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction \
  --allow-privileged=true \
  --profiling=false
apiserver_ready() {
  curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://$APISERVER_IP:$APISERVER_PORT/readyz"
}
wait_for kube-apiserver 120 kube-apiserver apiserver_ready
# readyz can answer before the apiserver has made kube-system, where the
# controller-manager creates its controllers' service accounts.
wait_for "namespace kube-system" 60 kube-apiserver kubectl get namespace kube-system

# Single instances: no leader election (a lost lease would make them exit
# whenever the apiserver pauses longer than the renew deadline). The
# controller-manager's client may send 100 requests/s (default 20): its
# persistent-volume binder makes about six per claim, so the default caps
# every provisioner at about 3 claims/s (make bench-provision).
start kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 \
  --leader-elect=false \
  --controllers '*,-nodeipam' \
  --root-ca-file "$PKI/ca.crt" \
  --service-account-private-key-file "$PKI/sa.key" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --kube-api-qps=100 --kube-api-burst=200 \
  --profiling=false
start kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig "$STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 \
  --leader-elect=false \
  --profiling=false
wait_for kube-controller-manager 60 kube-controller-manager curl -skf https://127.0.0.1:10257/healthz
wait_for kube-scheduler 60 kube-scheduler curl -skf https://127.0.0.1:10259/healthz

# --- kubelets -------------------------------------------------------------
# Every kubelet also serves the device-plugin socket at a fixed path,
# /var/lib/kubelet/device-plugins/kubelet.sock (the last one started wins;
# device plugins are not used here). down.sh removes it if we made it.
if [ ! -e /var/lib/kubelet ]; then touch "$STATE/created-var-lib-kubelet"; fi
for n in $(node_names); do
  d="$(node_dir "$n")"
  cat >"$d/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host runs cgroup v1 and refuses negative oom_score_adj; the kubelet
# here manages no cgroups of its own.
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$(node_sock "$n")
address: $(node_ip "$n")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
podLogsDir: $d/pod-logs
volumePluginDir: $d/volume-plugins
resolvConf: $STATE/resolv.conf
clusterDomain: cluster.local
maxPods: 250
tlsCertFile: $PKI/kubelet-$n-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-$n-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
# Three kubelets share one disk: evict only when it is really full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
imageGCHighThresholdPercent: 98
imageGCLowThresholdPercent: 97
EOF
  start_kubelet "$n"
done
for n in $(node_names); do
  wait_for "node $n registered" 120 "kubelet-$n" kubectl get node "$n"
done
node_ready() { [ "$(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
for n in $(node_names); do
  wait_for "node $n Ready" 120 "kubelet-$n" node_ready "$n"
done

# Pods are refused until the controller-manager has made their namespace's
# service account: wait for default's, so the cluster is usable at once.
wait_for "service account default/default" 60 kube-controller-manager kubectl -n default get serviceaccount default

kubectl get nodes -o wide
log "up in $((SECONDS - t0)) s"
echo
echo "export KUBECONFIG=$KUBECONFIG_FILE"
