#!/usr/bin/env bash
# Builds etcd and the Kubernetes binaries the local test cluster runs, from the
# Go module proxy, into $FERRY_K8S_BIN (default ~/.cache/ferry/k8s-v1.37.2/).
# A binary already there is not rebuilt. Builds run one after another at low
# priority (nice): the first run takes 15-25 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/cluster/versions.sh
source "$here/versions.sh"
export PATH="/usr/local/go/bin:$PATH"
out="$FERRY_K8S_BIN"
mkdir -p "$out"

log() { echo "cluster-bins: $*" >&2; }

# One build at a time (cluster-up runs this too): a second caller waits.
exec 9>"$out/.lock"
if ! flock -n 9; then
  log "another build runs; waiting for it"
  flock 9
fi

# The version the server reports: without these ldflags it says v0.0.0-master,
# which kubectl and the CSI sidecars cannot parse. The module zip carries no git
# commit, so gitCommit names where the sources came from; buildDate is the
# release's time as the proxy records it (reproducible).
k8s_ldflags() {
  local ver="$K8S_VERSION" major minor
  major="${ver#v}"; major="${major%%.*}"
  minor="${ver#v*.}"; minor="${minor%%.*}"
  local p=k8s.io/component-base/version
  local q=k8s.io/client-go/pkg/version
  local f=""
  for pkg in "$p" "$q"; do
    f+=" -X $pkg.gitVersion=$ver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitCommit=$K8S_GIT_COMMIT -X $pkg.gitTreeState=clean -X $pkg.buildDate=$K8S_BUILD_DATE"
  done
  echo "-s -w$f"
}

build() { # build NAME MODULE_DIR PACKAGE [LDFLAGS]
  local name="$1" dir="$2" pkg="$3" ldflags="${4:-}"
  if [ -x "$out/$name" ]; then
    log "$name: cached ($out/$name)"
    return
  fi
  log "building $name ..."
  local start=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  log "$name built in $((SECONDS - start)) s"
}

total=$SECONDS
build etcd "$here/etcd" go.etcd.io/etcd/server/v3 \
  "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-proxy"
ld="$(k8s_ldflags)"
for cmd in kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl; do
  build "$cmd" "$here/k8s" "k8s.io/kubernetes/cmd/$cmd" "$ld"
done
# cri-clean (this repo's, in the same module): cluster-down's pod remover.
build cri-clean "$here/k8s" ./cri-clean "-s -w"
log "all binaries in $out ($((SECONDS - total)) s)"
