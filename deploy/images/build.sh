#!/usr/bin/env bash
# `make images` and `make push`: Ferry's image and the kubernetes-csi
# sidecars' as multi-architecture OCI images (deploy/images, with
# go-containerregistry), one OCI archive each in $OUT; with PUSH=1 also
# pushed to $REGISTRY (credentials: docker login, or $DOCKER_CONFIG).
#   VERSION    the tag (default: git describe, as `make build` stamps)
#   REGISTRY   default ghcr.io/ferry-csi: <registry>/ferry:<version>,
#              <registry>/csi-provisioner:v6.3.0, ...
#   PLATFORMS  default "linux/amd64 linux/arm64"
#   OUT        default ~/.cache/ferry/images
# A version that is not a release (vX.Y.Z) is also tagged dev: the tag
# deploy/ and the chart's defaults name, which the test cluster runs.
# Ferry's image holds the static ferry binary, its zfs and zpool, which run
# the host's own, and for one release this machine's zfs and zpool (README,
# "Images"). Nothing is pulled.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
registry="${REGISTRY:-ghcr.io/ferry-csi}"
version="${VERSION:-$(git -C "$repo" describe --tags --match 'v*' --always --dirty 2>/dev/null || echo dev)}"
platforms="${PLATFORMS:-linux/amd64 linux/arm64}"
out="${OUT:-$cache/images}"
log() { echo "images: $*" >&2; }
mkdir -p "$out" "$cache/tools"

tool="$cache/tools/images"
(cd "$repo/deploy/images" && CGO_ENABLED=0 nice -n 10 go build -o "$tool" .)

plat_args=() arches=()
for p in $platforms; do
  case "$p" in linux/*) ;; *) log "platform $p: only linux/<arch>"; exit 2 ;; esac
  plat_args+=(-platform "$p")
  arches+=("${p#linux/}")
done
tags=()
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || tags=(-tag dev)
push=()
[ "${PUSH:-}" = 1 ] && push=(-push)
revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
labels=(-label org.opencontainers.image.source=https://github.com/ferry-csi/ferry
  -label org.opencontainers.image.licenses=Apache-2.0
  -label "org.opencontainers.image.revision=$revision")

# Ferry and its zfs and zpool (cmd/ferry-hosttool: they run the host's
# own tools in the host's root, --host-root), static, for every platform.
stage="$cache/images-stage"
for arch in "${arches[@]}"; do
  mkdir -p "$stage/linux-$arch"
  (cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" nice -n 10 go build -trimpath \
    -ldflags "-X main.version=$version" -o "$stage/linux-$arch/ferry" ./cmd/ferry)
  (cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" nice -n 10 go build -trimpath \
    -o "$stage/linux-$arch/ferry-hosttool" ./cmd/ferry-hosttool)
done
# For one release, the build machine's zfs and zpool too, in its own
# platform's image only, in /usr/libexec/ferry: the hosttool runs them
# where no host root is set, which is only in the volume managers of the
# previous release, renewed in place on this image (README, "Images").
# IMAGE_ZFS=none leaves them out.
own_zfs=()
if [ "${IMAGE_ZFS:-host}" = host ] && [ -x /usr/sbin/zfs ] && [ -x /usr/sbin/zpool ] &&
  [[ " $platforms " == *" linux/$(go env GOARCH) "* ]]; then
  own_zfs=(-ldd /usr/sbin/zfs=/usr/libexec/ferry/zfs -ldd /usr/sbin/zpool=/usr/libexec/ferry/zpool
    -dir /var/run/zfs -symlink /etc/mtab=/proc/self/mounts)
fi
"$tool" -ref "$registry/ferry:$version" "${tags[@]}" "${plat_args[@]}" "${push[@]}" -o "$out/ferry.tar" \
  -file "$stage/linux-{arch}/ferry=/usr/local/bin/ferry" \
  -file "$stage/linux-{arch}/ferry-hosttool=/usr/local/bin/ferry-hosttool" \
  -symlink /usr/sbin/zfs=/usr/local/bin/ferry-hosttool -symlink /usr/sbin/zpool=/usr/local/bin/ferry-hosttool \
  "${own_zfs[@]}" -dir /host \
  -dir /tmp=1777 -dir /etc \
  -label org.opencontainers.image.title=ferry -label "org.opencontainers.image.version=$version" "${labels[@]}" \
  -entrypoint /usr/local/bin/ferry

# The sidecars, built from the Go module proxy at pinned versions.
sidecar_dir="${FERRY_SIDECAR_BIN:-$cache/sidecars}"
FERRY_SIDECAR_ARCHES="${arches[*]}" "$repo/tests/cluster/sidecars/build.sh"
host_arch="$(go env GOARCH)"
for s in csi-provisioner:v6.3.0 csi-resizer:v2.3.0 csi-snapshotter:v8.7.0 snapshot-controller:v8.7.0; do
  name="${s%%:*}" ver="${s##*:}"
  newest="$tool"
  for arch in "${arches[@]}"; do
    src="$sidecar_dir/$name-$ver"
    [ "$arch" = "$host_arch" ] || src="$src-linux-$arch"
    mkdir -p "$stage/linux-$arch"
    ln -sf "$src" "$stage/linux-$arch/$name"
    [ "$src" -nt "$newest" ] && newest="$src"
  done
  # Unchanged binaries, tool and platforms: the archive stands (pushed again with PUSH=1).
  key="$registry/$name:$ver ${platforms}"
  if [ -z "${push[*]}" ] && [ -s "$out/$name.tar" ] && [ "$out/$name.tar" -nt "$newest" ] &&
    [ "$(cat "$out/.$name.key" 2>/dev/null)" = "$key" ]; then
    continue
  fi
  "$tool" -ref "$registry/$name:$ver" "${plat_args[@]}" "${push[@]}" -o "$out/$name.tar" \
    -file "$stage/linux-{arch}/$name=/$name" -dir /tmp=1777 \
    -label "org.opencontainers.image.title=$name" -label "org.opencontainers.image.version=$ver" \
    -label org.opencontainers.image.source=https://github.com/kubernetes-csi -label org.opencontainers.image.licenses=Apache-2.0 \
    -entrypoint "/$name" >/dev/null
  echo "$key" >"$out/.$name.key"
done
log "written to $out: ferry ($version${tags:+, dev}), csi-provisioner, csi-resizer, csi-snapshotter, snapshot-controller for $platforms"
