#!/usr/bin/env bash
# `make e2e-upgrade`, on the running local cluster (make cluster-up
# cluster-deploy): Ferry is rolled from an earlier commit's image
# (FERRY_UPGRADE_FROM, default HEAD~1: the previous commit) to this one
# while a pod writes to a replicated volume (TestUpgrade*). Builds the
# earlier commit from `git archive` into ~/.cache (no work tree is
# touched), writes its image as ghcr.io/ferry-csi/ferry:<rev> and imports it
# into every node.
# Prints "upgrade: N.N s, pause max N.N s, lost writes: N".
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

from="${FERRY_UPGRADE_FROM:-HEAD~1}"
rev="$(git -C "$repo" rev-parse --short=12 "$from")"
src="$FERRY_CACHE/upgrade-from/$rev"
if [ ! -x "$src/bin/ferry" ]; then
  rm -rf "$src" && mkdir -p "$src"
  git -C "$repo" archive "$rev" | tar -x -C "$src"
  (cd "$src" && nice -n 15 go build -o bin/ferry ./cmd/ferry)
  log "built ferry at $rev (the version upgraded from)"
fi
if [ -d "$src/cmd/ferry-hosttool" ] && [ ! -x "$src/bin/ferry-hosttool" ]; then
  (cd "$src" && CGO_ENABLED=0 nice -n 15 go build -o bin/ferry-hosttool ./cmd/ferry-hosttool)
fi
mkdir -p "$TOOLS" "$IMAGES"
tool="$FERRY_CACHE/tools/images"
(mkdir -p "$(dirname "$tool")" && cd "$repo/deploy/images" && CGO_ENABLED=0 go build -o "$tool" .)
# The earlier commit's image as its deploy/images/build.sh makes it: with
# the build machine's zfs and zpool, and, from the commit that runs the
# host's own tools on, its ferry-hosttool as the image's zfs and zpool
# (the machine's then in /usr/libexec/ferry).
ferry_args=(-file "$src/bin/ferry=/usr/local/bin/ferry")
if ldd "$src/bin/ferry" >/dev/null 2>&1; then
  ferry_args=(-ldd "$src/bin/ferry=/usr/local/bin/ferry")
fi
zfs_args=(-ldd /usr/sbin/zfs -ldd /usr/sbin/zpool)
if [ -x "$src/bin/ferry-hosttool" ]; then
  zfs_args=(-file "$src/bin/ferry-hosttool=/usr/local/bin/ferry-hosttool"
    -symlink /usr/sbin/zfs=/usr/local/bin/ferry-hosttool -symlink /usr/sbin/zpool=/usr/local/bin/ferry-hosttool
    -ldd /usr/sbin/zfs=/usr/libexec/ferry/zfs -ldd /usr/sbin/zpool=/usr/libexec/ferry/zpool -dir /host)
fi
image="ghcr.io/ferry-csi/ferry:$rev"
"$tool" -o "$IMAGES/ferry-$rev.tar" -ref "$image" \
  "${ferry_args[@]}" "${zfs_args[@]}" \
  -dir /var/run/zfs -dir /tmp=1777 -dir /etc -symlink /etc/mtab=/proc/self/mounts \
  -entrypoint /usr/local/bin/ferry >/dev/null
for n in $(node_names); do
  running "containerd-$n" || die "containerd of $n is not running (make cluster-up)"
  ctr --address "$(node_sock "$n")" -n k8s.io images import --all-platforms "$IMAGES/ferry-$rev.tar" >/dev/null
done
log "image $image imported into every node"

cd "$repo"
FERRY_UPGRADE_FROM_IMAGE="$image" FERRY_UPGRADE_FROM_DIR="$src" KUBECONFIG="${KUBECONFIG:-$KUBECONFIG_FILE}" \
  go test -tags cluster -count=1 -timeout 20m -v -run '^TestUpgrade' ./tests/cluster/e2e/ 2>&1 | tests/scripts/summarize-go-test.sh
