#!/usr/bin/env bash
# The quickstart's commands (docs/quickstart.md), on the local test cluster:
# the page's blocks marked <!-- ci: NAME --> are read from it and run as
# they are written, with only what the page asks its reader to set given
# the test cluster's values (REGISTRY=ghcr.io/ferry-csi: the images
# imported on each node; POOL=ferry) and `helm` given the test cluster's
# differences (the post-renderer tests/cluster/helm-plugins/ferry-test-overlay:
# each node's pool and kubelet directory; --wait; --take-ownership and
# --force-conflicts over objects a kustomize deployment or kubectl set).
#   quickstart.sh show NAME   print the block
#   quickstart.sh run NAME    run it (kubectl calls that name no namespace
#                             use $QUICKSTART_NAMESPACE when set)
# Used by deploy.sh (install), tests/cluster/e2e (claim, watch, uninstall).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
page="$repo/docs/quickstart.md"

block() {
  awk -v mark="<!-- ci: $1 -->" '
    $0 == mark { want = 1; next }
    want && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }
  ' "$page"
}

[ $# -eq 2 ] || die "usage: quickstart.sh show|run NAME"
script="$(block "$2")"
[ -n "$script" ] || die "docs/quickstart.md has no block <!-- ci: $2 -->"
case "$1" in
  show) printf '%s\n' "$script"; exit 0 ;;
  run) ;;
  *) die "usage: quickstart.sh show|run NAME" ;;
esac

export KUBECONFIG="${KUBECONFIG:-$KUBECONFIG_FILE}"
helm() {
  local extra=()
  case "$1" in
    install | upgrade) extra=(--post-renderer ferry-test-overlay --take-ownership --force-conflicts --wait --timeout 5m) ;;
    uninstall) extra=(--wait --timeout 5m) ;;
  esac
  HELM_PLUGINS="$here/helm-plugins" KUBECTL="$BIN/kubectl" "$HELM" "$@" "${extra[@]}"
}
kubectl() {
  if [ -n "${QUICKSTART_NAMESPACE:-}" ]; then
    "$BIN/kubectl" --namespace "$QUICKSTART_NAMESPACE" "$@"
  else
    "$BIN/kubectl" "$@"
  fi
}
script="$(printf '%s\n' "$script" | sed -e 's|^REGISTRY=.*|REGISTRY=ghcr.io/ferry-csi|' -e 's|^POOL=.*|POOL=ferry|')"
cd "$repo"
log "quickstart: $2"
eval "$script"
