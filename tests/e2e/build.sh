#!/usr/bin/env bash
# Builds what the Kubernetes External Storage suite needs, from the Go module
# proxy through the module tests/cluster/k8s (its replace lines point
# Kubernetes' staging modules at v0.37.2), into $FERRY_K8S_BIN
# (~/.cache/ferry/k8s-v1.37.2/) next to the cluster's binaries:
#   e2e.test  go test -c k8s.io/kubernetes/test/e2e, the release's suite
#   ginkgo    the ginkgo v2 CLI at the version Kubernetes requires (runs
#             e2e.test in parallel processes)
#   agnhost   k8s.io/kubernetes/test/images/agnhost, for the agnhost image
# A binary already there is not rebuilt. Builds run at low priority (nice).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/../cluster/k8s"
# shellcheck source=tests/cluster/versions.sh
source "$here/../cluster/versions.sh"
export PATH="/usr/local/go/bin:$PATH"
out="$FERRY_K8S_BIN"
mkdir -p "$out"
log() { echo "e2e-build: $*" >&2; }

# The same lock as cluster-bins: one big build at a time on this machine.
exec 9>"$out/.lock"
if ! flock -n 9; then
  log "another build runs; waiting for it"
  flock 9
fi

# The version ldflags of cluster-bins: the suite reports the release it is.
ldflags() {
  local ver="$K8S_VERSION" major minor f="" pkg
  major="${ver#v}"; major="${major%%.*}"
  minor="${ver#v*.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$ver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitCommit=$K8S_GIT_COMMIT -X $pkg.gitTreeState=clean -X $pkg.buildDate=$K8S_BUILD_DATE"
  done
  echo "-s -w$f"
}

build() { # build NAME KIND(build|test) PACKAGE LDFLAGS
  local name="$1" kind="$2" pkg="$3" ld="$4"
  if [ -x "$out/$name" ]; then
    log "$name: cached ($out/$name)"
    return
  fi
  log "building $name ..."
  local start=$SECONDS
  if [ "$kind" = test ]; then
    (cd "$mod" && CGO_ENABLED=0 nice -n 15 go test -c -vet=off -trimpath -ldflags "$ld" -o "$out/$name.tmp" "$pkg")
  else
    (cd "$mod" && CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "$ld" -o "$out/$name.tmp" "$pkg")
  fi
  mv "$out/$name.tmp" "$out/$name"
  log "$name built in $((SECONDS - start)) s"
}

total=$SECONDS
ld="$(ldflags)"
build e2e.test test k8s.io/kubernetes/test/e2e "$ld"
build ginkgo build github.com/onsi/ginkgo/v2/ginkgo "-s -w"
build agnhost build k8s.io/kubernetes/test/images/agnhost "$ld"
log "e2e.test, ginkgo and agnhost in $out ($((SECONDS - total)) s)"
