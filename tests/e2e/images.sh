#!/usr/bin/env bash
# Writes the test images the chosen External Storage tests run, under the
# exact names the e2e framework of Kubernetes v1.37.2 uses
# (test/utils/image/manifest.go), and imports them into every node of the
# running local cluster. Nothing is pulled: they are OCI archives written
# by the project's image tool (deploy/images) from Debian's static busybox and the
# agnhost binary tests/e2e/build.sh builds from the module proxy.
#   registry.k8s.io/e2e-test-images/busybox:1.37.0-2         the default test image
#   registry.k8s.io/e2e-test-images/agnhost:2.66.1           subPath's containers
#   registry.k8s.io/e2e-test-images/nginx:1.27.0-2           volumes' exec test (runs sh)
#   registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1  multiVolume's pods (sh, sleep)
# Every one carries busybox's applets in /bin (the tests run /bin/sh -c
# scripts: dd, sha256sum, ls, stat, mount, ...); agnhost is /agnhost, the
# entrypoint, with CMD pause, as upstream. The other three have no entrypoint
# and CMD sh: the tests always set the command.
# With --build-only, writes the archives and imports nothing.
set -euo pipefail
e2e="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/lib.sh
source "$e2e/../cluster/lib.sh"

REG=registry.k8s.io/e2e-test-images
images=(
  "busybox $REG/busybox:1.37.0-2"
  "agnhost $REG/agnhost:2.66.1"
  "nginx $REG/nginx:1.27.0-2"
  "glibc-dns-testing $REG/glibc-dns-testing:2.1.1"
)

mkdir -p "$TOOLS" "$IMAGES"
tool="$FERRY_CACHE/tools/images"
[ -x "$tool" ] || (mkdir -p "$(dirname "$tool")" && cd "$repo/deploy/images" && CGO_ENABLED=0 nice -n 15 go build -o "$tool" .)
[ -x "$BIN/agnhost" ] || "$e2e/build.sh"
command -v busybox >/dev/null || "$here/install-deps.sh"
busybox_bin="$(command -v busybox)"
ldd "$busybox_bin" >/dev/null 2>&1 && die "$busybox_bin is not static (apt-get install busybox-static)"

base=(-file "$busybox_bin=/bin/busybox" -dir /tmp=1777 -dir /etc -dir /root=0700
  -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
for a in $("$busybox_bin" --list); do
  [ "$a" = busybox ] || base+=(-symlink "/bin/$a=busybox")
done

for spec in "${images[@]}"; do
  read -r name ref <<<"$spec"
  case "$name" in
    agnhost) extra=(-file "$BIN/agnhost=/agnhost" -symlink /agnhost-2=agnhost -dir /uploads
                    -entrypoint /agnhost -cmd pause) ;;
    *) extra=(-cmd sh) ;;
  esac
  "$tool" -o "$IMAGES/e2e-$name.tar" -ref "$ref" "${base[@]}" "${extra[@]}" >/dev/null
done
log "e2e images written: $(for s in "${images[@]}"; do printf '%s ' "${s#* }"; done)"

[ "${1:-}" = --build-only ] && exit 0
for n in $(node_names); do
  running "containerd-$n" || die "containerd of $n is not running (make cluster-up)"
  for spec in "${images[@]}"; do
    ctr --address "$(node_sock "$n")" -n k8s.io images import --all-platforms "$IMAGES/e2e-${spec%% *}.tar" >/dev/null
  done
  log "e2e images imported into $n"
done
