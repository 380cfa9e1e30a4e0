#!/bin/sh
# The chart's rendered objects (stdin) with tests/cluster/overlay's patches
# and its fence ConfigMap, through kubectl kustomize ($KUBECTL).
set -eu
overlay="$(cd "$(dirname "$0")/../../overlay" && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cat >"$dir/chart.yaml"
cp "$overlay/node-daemonset-patch.yaml" "$overlay/replica-template.yaml" "$overlay/fence-node.yaml" "$dir/"
cat >"$dir/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - chart.yaml
  - fence-node.yaml
patches:
  - target:
      kind: DaemonSet
      name: ferry-node
    path: node-daemonset-patch.yaml
  - path: replica-template.yaml
YAML
exec "${KUBECTL:-kubectl}" kustomize "$dir"
