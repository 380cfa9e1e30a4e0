# Versions and paths shared by the cluster scripts (sourced, not run).
K8S_VERSION=v1.37.2
# The module proxy's release time of k8s.io/kubernetes@v1.37.2 (its .info).
K8S_BUILD_DATE=2026-10-27T12:01:04Z
K8S_GIT_COMMIT=module-proxy
ETCD_VERSION=v3.6.16
FERRY_CACHE="${FERRY_CACHE:-$HOME/.cache/ferry}"
FERRY_K8S_BIN="${FERRY_K8S_BIN:-$FERRY_CACHE/k8s-$K8S_VERSION}"
