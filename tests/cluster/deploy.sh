#!/usr/bin/env bash
# Deploys Ferry on the running local cluster: builds and imports the images
# (ghcr.io/ferry-csi/ferry:dev and the sidecars), applies the VolumeSnapshot
# CRDs, installs Ferry and waits until every node's kubelet has registered
# the driver and the snapshot controller runs. Idempotent: run it again
# after changing the code.
#   FERRY_DEPLOY=helm (default): the chart deploy/helm/ferry installed by
#     the quickstart's own command (quickstart.sh), as a user installs it,
#     with the test cluster's differences from the post-renderer
#     tests/cluster/helm-plugins/ferry-test-overlay (the same patches as
#     the overlay below) and the chart's own peer PKI; this cluster's
#     StorageClasses apart.
#   FERRY_DEPLOY=kustomize: deploy/ through the overlay tests/cluster/overlay
#     (kubectl apply -k), with a throw-away peer CA made here.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
export KUBECONFIG="$KUBECONFIG_FILE"
k() { "$BIN/kubectl" "$@"; }
k get nodes >/dev/null 2>&1 || die "the cluster is not up (make cluster-up)"
how="${FERRY_DEPLOY:-helm}"
case "$how" in
  helm) [ -x "$HELM" ] || make -C "$repo" helm >/dev/null ;;
  kustomize) ;;
  *) die "FERRY_DEPLOY=$how: want helm or kustomize" ;;
esac

"$here/images.sh"
crds="${FERRY_SIDECAR_BIN:-$FERRY_CACHE/sidecars}/crds-v8.7.0"
k apply --server-side -f "$crds" >/dev/null
k wait --for=condition=Established --timeout=60s crd/volumesnapshots.snapshot.storage.k8s.io \
  crd/volumesnapshotcontents.snapshot.storage.k8s.io crd/volumesnapshotclasses.snapshot.storage.k8s.io >/dev/null
# Peer mutual TLS for the replicas (a throw-away CA, made once per cluster):
# the shared certificate and the CA bundle every node trusts, and the CA's
# key for Ferry's signer, which issues each node its own certificate. (The
# chart makes its own: FERRY_DEPLOY=helm.)
if [ "$how" = kustomize ] && ! k -n ferry-system get secret ferry-peer-ca >/dev/null 2>&1; then
  k create namespace ferry-system --dry-run=client -o yaml | k apply -f - >/dev/null
  (cd "$repo" && CGO_ENABLED=0 nice -n 15 go build -o "$TOOLS/peercert" ./tests/cluster/peercert)
  rm -rf "$STATE/peer-tls"
  "$TOOLS/peercert" -dir "$STATE/peer-tls"
  k -n ferry-system create secret generic ferry-peer-tls --from-file="$STATE/peer-tls/ca.crt" \
    --from-file="$STATE/peer-tls/tls.crt" --from-file="$STATE/peer-tls/tls.key" --dry-run=client -o yaml | k apply -f - >/dev/null
  k -n ferry-system create secret tls ferry-peer-ca --cert="$STATE/peer-tls/ca.crt" --key="$STATE/peer-tls/ca.key" >/dev/null
fi
# The overlay's node fence command (overlay/fence-node.yaml) is a script
# for a static busybox the daemons mount read-only from here (the ferry
# image has no shell); images.sh checked that busybox is static.
busybox_bin="$(command -v busybox)"
mkdir -p "$STATE/fence" "$STATE/fence-log"
# install replaces the file (a new inode): a fence running the old one is unaffected.
cmp -s "$busybox_bin" "$STATE/fence/busybox" || install -m 0755 "$busybox_bin" "$STATE/fence/busybox"
if [ "$how" = helm ]; then
  # Helm installs crds/ once and never upgrades it: the CRD first, as the
  # chart's README tells a user upgrading.
  k apply --server-side --force-conflicts -f "$repo/deploy/helm/ferry/crds/" >/dev/null
  # The quickstart's install command (docs/quickstart.md, step 3), as
  # quickstart.sh runs it here: with the post-renderer, --take-ownership
  # (objects a kustomize deployment made before, the admission policies
  # an uninstall keeps, become the release's) and --force-conflicts
  # (fields kubectl set, a test's image change, are the chart's again).
  "$here/quickstart.sh" run install >/dev/null
  k apply -f "$repo/tests/cluster/overlay/storageclass.yaml" >/dev/null
else
  k apply -k "$repo/tests/cluster/overlay" >/dev/null
fi
# A rebuilt ferry image has the same tag (dev): restart the pods to run it.
k -n ferry-system rollout restart daemonset/ferry-node deployment/ferry-snapshot-controller deployment/ferry-signer >/dev/null
k -n ferry-system rollout status daemonset/ferry-node --timeout=180s
k -n ferry-system rollout status deployment/ferry-snapshot-controller --timeout=120s
k -n ferry-system rollout status deployment/ferry-signer --timeout=120s
for n in $(node_names); do
  deadline=$((SECONDS + 120))
  until k get csinode "$n" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null | grep -qw ferry.zfs.csi.io; do
    [ $SECONDS -lt $deadline ] || die "the kubelet of $n did not register ferry.zfs.csi.io (kubectl -n ferry-system logs -l app.kubernetes.io/component=node -c ferry)"
    sleep 1
  done
done
log "ferry deployed ($how); driver registered on: $(node_names | tr '\n' ' ')"
k get pods -n ferry-system -o wide
