#!/usr/bin/env bash
# `make e2e`: node loss on the local cluster, three nodes then two. On the
# three-node cluster (brought up and deployed if it is not), every
# TestNodeLoss*: the primary's node killed, cut off, paused and resumed,
# declared out of service; the API server stopped for a minute; a copy
# finishing its first sync while the primary cannot reach the API server; a
# cut shorter than the takeover. Then the cluster is rebuilt with two nodes
# and the kill and the cut are run again (the API server is the only
# arbiter: no third node). Each failover prints "failover node-loss: N.N s"
# and "lost writes: N". Leaves the cluster down.
set -euo pipefail
cd "$(dirname "$0")/../.."
export FERRY_E2E_T0="${FERRY_E2E_T0:-$(date +%s)}"

down() { make --no-print-directory cluster-down >/dev/null 2>&1 || true; FERRY_E2E_NODES=2 make --no-print-directory cluster-down >/dev/null 2>&1 || true; }
trap down EXIT

echo "== node loss on three nodes"
make --no-print-directory cluster-up cluster-deploy >/dev/null
FERRY_E2E_NODES=3 make --no-print-directory e2e-node-loss

echo "== node loss on two nodes"
make --no-print-directory cluster-down >/dev/null
FERRY_E2E_NODES=2 make --no-print-directory cluster-up cluster-deploy >/dev/null
FERRY_E2E_NODES=2 make --no-print-directory e2e-node-loss NODE_LOSS_TESTS='^TestNodeLoss(Killed|CutOff)'
