#!/usr/bin/env bash
# Writes the cluster's images as docker-archive tars with the project's own
# tool (tests/cluster/imagetar) and imports them into every running node's
# containerd. Nothing is pulled from anywhere.
#   registry.k8s.io/pause:3.6  the pod sandbox: tests/cluster/pause, static
#   ferry:dev                  bin/ferry, the zfs and zpool CLIs with their
#                              libraries, /var/run/zfs for the daemon's socket,
#                              /etc/mtab (without it zfs thinks nothing is
#                              mounted: unmount does nothing, destroy is busy)
#   ferry-test:dev             a static busybox with its applets, for test pods
# With --build-only, writes the tars and imports nothing.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

mkdir -p "$TOOLS" "$IMAGES"
(cd "$repo" && CGO_ENABLED=0 nice -n 15 go build -o "$TOOLS/" ./tests/cluster/imagetar ./tests/cluster/pause)
(cd "$repo" && nice -n 15 make -s build)
command -v busybox >/dev/null && [ -x /usr/sbin/zfs ] || "$here/install-deps.sh"

"$TOOLS/imagetar" -o "$IMAGES/pause.tar" -tag registry.k8s.io/pause:3.6 \
  -file "$TOOLS/pause=/pause" -entrypoint /pause

# bin/ferry is static unless cgo was on; if it is not, its libraries come along.
ferry_args=(-file "$repo/bin/ferry=/usr/local/bin/ferry")
if ldd "$repo/bin/ferry" >/dev/null 2>&1; then
  ferry_args=(-ldd "$repo/bin/ferry=/usr/local/bin/ferry")
fi
"$TOOLS/imagetar" -o "$IMAGES/ferry.tar" -tag ferry:dev \
  "${ferry_args[@]}" -ldd /usr/sbin/zfs -ldd /usr/sbin/zpool \
  -dir /var/run/zfs -dir /tmp=1777 -dir /etc -symlink /etc/mtab=/proc/self/mounts \
  -entrypoint /usr/local/bin/ferry

busybox_bin="$(command -v busybox)"
ldd "$busybox_bin" >/dev/null 2>&1 && die "$busybox_bin is not static (apt-get install busybox-static)"
applets=()
for a in $("$busybox_bin" --list); do
  [ "$a" = busybox ] || applets+=(-symlink "/bin/$a=busybox")
done
"$TOOLS/imagetar" -o "$IMAGES/ferry-test.tar" -tag ferry-test:dev \
  -file "$busybox_bin=/bin/busybox" "${applets[@]}" -dir /tmp=1777 -dir /etc -cmd sh

# The kubernetes-csi sidecars (make cluster-sidecars builds them), as
# ferry/<name>:<version>: the images deploy/ names.
sidecar_dir="${FERRY_SIDECAR_BIN:-$FERRY_CACHE/sidecars}"
"$repo/tests/cluster/sidecars/build.sh"
sidecar_imgs=()
for s in csi-provisioner:v6.3.0 csi-resizer:v2.3.0 csi-snapshotter:v8.7.0 snapshot-controller:v8.7.0; do
  name="${s%%:*}" ver="${s##*:}"
  "$TOOLS/imagetar" -o "$IMAGES/$name.tar" -tag "ferry/$name:$ver" \
    -file "$sidecar_dir/$name-$ver=/$name" -dir /tmp=1777 -entrypoint "/$name"
  sidecar_imgs+=("$name")
done

[ "${1:-}" = --build-only ] && exit 0
for n in $(node_names); do
  running "containerd-$n" || die "containerd of $n is not running (make cluster-up)"
  for img in pause ferry ferry-test "${sidecar_imgs[@]}"; do
    ctr --address "$(node_sock "$n")" -n k8s.io images import --all-platforms "$IMAGES/$img.tar" >/dev/null
  done
  log "images imported into $n: pause, ferry, ferry-test, ${sidecar_imgs[*]}"
done
