#!/usr/bin/env bash
# Runs the kubernetes-csi sanity suite (csi-sanity) against ferry on a real
# ZFS pool made on a sparse file: `ferry controller` and `ferry daemon` run
# as two processes on two sockets, as they do in a cluster.
#
# usage: tests/sanity/run.sh FERRY_BIN CSI_SANITY_BIN
# Prints ginkgo's summary and exits non-zero unless it reports 0 Failed.
set -euo pipefail

ferry=${1:?ferry binary}
sanity=${2:?csi-sanity binary}
here=$(cd "$(dirname "$0")" && pwd)
"$here/../scripts/zfs-up.sh"

work=$(mktemp -d /var/tmp/ferry-sanity.XXXXXX)
pool="ferry-sanity-$(basename "$work" | cut -d. -f2 | tr 'A-Z' 'a-z')"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # zfs-fuse says "pool is busy" for a moment after its last user went away.
  for _ in $(seq 1 50); do
    zpool list "$pool" >/dev/null 2>&1 || break
    zpool destroy -f "$pool" 2>/dev/null && break
    sleep 0.2
  done
  if zpool list "$pool" >/dev/null 2>&1; then echo "sanity: pool $pool could not be destroyed" >&2; fi
  rm -rf "$work"
}
trap cleanup EXIT

truncate -s 4G "$work/pool.img"
zpool create -f -m "$work/mnt-$pool" "$pool" "$work/pool.img" 2>/dev/null

common=(--pool "$pool" --parent-dataset ferry --node-id sanity-node --log-format console --log-level info)
"$ferry" controller "${common[@]}" --csi-endpoint "unix://$work/controller.sock" >"$work/controller.log" 2>&1 &
pids+=($!)
# csi-sanity's mount directory ($work/target) plays the kubelet's pod
# directories: publish targets must lie below --kubelet-dir.
"$ferry" daemon "${common[@]}" --csi-endpoint "unix://$work/node.sock" --kubelet-dir "$work" >"$work/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  [ -S "$work/controller.sock" ] && [ -S "$work/node.sock" ] && break
  sleep 0.1
done
[ -S "$work/controller.sock" ] && [ -S "$work/node.sock" ] || { cat "$work"/*.log; echo "sanity: ferry did not start" >&2; exit 1; }

set +e
"$sanity" \
  --csi.endpoint "unix://$work/node.sock" \
  --csi.controllerendpoint "unix://$work/controller.sock" \
  --csi.mountdir "$work/target" \
  --csi.stagingdir "$work/staging" \
  --csi.testvolumesize 67108864 \
  --csi.testvolumeexpandsize 134217728 \
  --ginkgo.no-color --ginkgo.v \
  >"$work/sanity.log" 2>&1
rc=$?
set -e
cp "$work/sanity.log" "${SANITY_LOG:-/dev/null}" 2>/dev/null || true
grep -E '^(Ran [0-9]+ of [0-9]+ Specs|FAIL!|SUCCESS!|\[FAIL\])' "$work/sanity.log" || true
echo "Skipped specs, by the reason csi-sanity gives (capabilities Ferry does not advertise):"
grep -E '^\s+\[SKIPPED\] [A-Z]' "$work/sanity.log" | sed 's/^ *\[SKIPPED\] //' | sort | uniq -c || true
summary=$(grep -E '(Passed|Failed).*\|' "$work/sanity.log" | tail -n 1 || true)
echo "$summary"
if [ $rc -ne 0 ] || ! grep -q ' 0 Failed' <<<"$summary"; then
  echo "----- csi-sanity output (tail) -----"
  tail -n 150 "$work/sanity.log"
  echo "----- ferry controller log (tail) -----"; tail -n 40 "$work/controller.log"
  echo "----- ferry daemon log (tail) -----"; tail -n 40 "$work/node.log"
  exit 1
fi
