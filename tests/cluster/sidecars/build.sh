#!/usr/bin/env bash
# Builds the kubernetes-csi sidecars Ferry's controller pods run, from the Go
# module proxy at pinned versions, into $FERRY_SIDECAR_BIN (default
# ~/.cache/ferry/sidecars/). Each sidecar gets a throw-away module of its own
# that requires it and copies its replace lines (except local paths, which
# the proxy's zip does not carry). A binary already built is not rebuilt.
# Also copies the VolumeSnapshot CRDs from the snapshotter's client module.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
out="${FERRY_SIDECAR_BIN:-$cache/sidecars}"
mkdir -p "$out"
log() { echo "sidecars: $*" >&2; }

exec 9>"$out/.lock"
if ! flock -n 9; then
  log "another build runs; waiting for it"
  flock 9
fi

# name module version package
sidecars=(
  "csi-provisioner github.com/kubernetes-csi/external-provisioner/v6 v6.3.0 cmd/csi-provisioner"
  "csi-resizer github.com/kubernetes-csi/external-resizer/v2 v2.3.0 cmd/csi-resizer"
  "csi-snapshotter github.com/kubernetes-csi/external-snapshotter/v8 v8.7.0 cmd/csi-snapshotter"
  "snapshot-controller github.com/kubernetes-csi/external-snapshotter/v8 v8.7.0 cmd/snapshot-controller"
)

# The architectures to build for besides this machine's (FERRY_SIDECAR_ARCHES,
# default amd64 and arm64: the images are multi-architecture). This
# machine's binary is $name-$version; another architecture's is
# $name-$version-linux-<arch>.
host_arch="$(go env GOARCH)"
arches="${FERRY_SIDECAR_ARCHES:-amd64 arm64}"
for s in "${sidecars[@]}"; do
  read -r name module version pkg <<<"$s"
  bin="$out/$name-$version"
  src="$out/src/$name-$version"
  if [ -x "$bin" ] && [ -f "$src/go.mod" ]; then
    log "$name $version: cached"
  else
    log "building $name $version ..."
    start=$SECONDS
    rm -rf "$src" && mkdir -p "$src"
    modfile="$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    [ -f "$modfile" ] || { log "no go.mod for $module@$version"; exit 1; }
    goline="$(grep -m1 '^go ' "$modfile")"
    {
      echo "module ferry.local/sidecar/$name"
      echo
      echo "$goline"
      echo
      echo "require $module $version"
      # replace lines, single or in a block, except local paths
      awk '
        /^replace \(/ { inblock=1; next }
        inblock && /^\)/ { inblock=0; next }
        inblock { if ($0 !~ /=>[[:space:]]*\.\.?\//) print "replace " $0; next }
        /^replace / { if ($0 !~ /=>[[:space:]]*\.\.?\//) print }
      ' "$modfile"
    } >"$src/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s/%s"\n' "$module" "$pkg" >"$src/tools.go"
    (cd "$src" && go mod tidy >/dev/null && CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$bin.tmp" "$module/$pkg")
    mv "$bin.tmp" "$bin"
    rm -f "$bin"-linux-* # built from the module made above, below
    log "$name built in $((SECONDS - start)) s"
  fi
  for arch in $arches; do
    abin="$bin-linux-$arch"
    [ "$arch" = "$host_arch" ] || [ -x "$abin" ] && continue
    log "building $name $version for linux/$arch ..."
    start=$SECONDS
    (cd "$src" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" nice -n 15 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$abin.tmp" "$module/$pkg")
    mv "$abin.tmp" "$abin"
    log "$name for linux/$arch built in $((SECONDS - start)) s"
  done
done

crds="$out/crds-v8.7.0"
if [ ! -d "$crds" ]; then
  dir="$(go mod download -json github.com/kubernetes-csi/external-snapshotter/client/v8@v8.7.0 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  mkdir -p "$crds.tmp"
  cp "$dir"/config/crd/snapshot.storage.k8s.io_volumesnapshot*.yaml "$crds.tmp"/
  chmod u+w "$crds.tmp"/*
  mv "$crds.tmp" "$crds"
fi
log "sidecars and CRDs in $out"
