#!/usr/bin/env bash
# Writes the cluster's images as OCI archives with the project's image tool
# (deploy/images, go-containerregistry) and imports them into every running
# node's containerd. Nothing is pulled from anywhere.
#   ghcr.io/ferry-csi/ferry:dev and the kubernetes-csi sidecars
#       exactly what `make images` writes (deploy/images/build.sh), for
#       linux/amd64 and linux/arm64; the linux/amd64 ferry image carries
#       this machine's zfs and zpool (README, "Images")
#   registry.k8s.io/pause:3.6  the pod sandbox: tests/cluster/pause, static
#   ferry-test:dev             a static busybox with its applets, for test pods
# With --build-only, writes the archives and imports nothing.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

mkdir -p "$TOOLS" "$IMAGES"
(cd "$repo" && CGO_ENABLED=0 nice -n 15 go build -o "$TOOLS/" ./tests/cluster/pause)
command -v busybox >/dev/null || "$here/install-deps.sh"
OUT="$IMAGES" "$repo/deploy/images/build.sh"
tool="$FERRY_CACHE/tools/images"

"$tool" -o "$IMAGES/pause.tar" -ref registry.k8s.io/pause:3.6 \
  -file "$TOOLS/pause=/pause" -entrypoint /pause >/dev/null

busybox_bin="$(command -v busybox)"
ldd "$busybox_bin" >/dev/null 2>&1 && die "$busybox_bin is not static (apt-get install busybox-static)"
applets=()
for a in $("$busybox_bin" --list); do
  [ "$a" = busybox ] || applets+=(-symlink "/bin/$a=busybox")
done
"$tool" -o "$IMAGES/ferry-test.tar" -ref docker.io/library/ferry-test:dev \
  -file "$busybox_bin=/bin/busybox" "${applets[@]}" -dir /tmp=1777 -dir /etc -cmd sh >/dev/null

sidecar_imgs=(csi-provisioner csi-resizer csi-snapshotter snapshot-controller)
[ "${1:-}" = --build-only ] && exit 0
for n in $(node_names); do
  running "containerd-$n" || die "containerd of $n is not running (make cluster-up)"
  for img in pause ferry ferry-test "${sidecar_imgs[@]}"; do
    ctr --address "$(node_sock "$n")" -n k8s.io images import --all-platforms "$IMAGES/$img.tar" >/dev/null
  done
  # The quickstart's pod (docs/quickstart.md, run by tests/cluster/quickstart.sh)
  # names busybox: here the test image's static busybox, never pulled.
  ctr --address "$(node_sock "$n")" -n k8s.io images tag --force docker.io/library/ferry-test:dev docker.io/library/busybox:1.37 >/dev/null
  log "images imported into $n: pause, ferry, ferry-test, ${sidecar_imgs[*]}"
done
