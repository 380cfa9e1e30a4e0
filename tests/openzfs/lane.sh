#!/usr/bin/env bash
# lane.sh [SERIES...]: the OpenZFS lane (issue 24). For each series (2.3,
# 2.1; both by default) it builds or reuses the guest image (image.sh),
# builds the test binaries on the host (static, no cgo), copies the
# project's files into a 9p share, boots the guest (boot.sh) to run
# guest-tests.sh there, and prints the OpenZFS version and every suite's
# result. 2.3 runs every suite; 2.1 the short plan (the contract suite,
# fences, the resume, space and rollback scenarios).
# FERRY_OPENZFS_PLAN names the suites to run instead (guest-tests.sh).
# Exits non-zero if any suite failed or the guest did not finish.
# Timings inside the guest mean nothing (software emulation): this lane
# is for correctness only.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export PATH=/usr/local/go/bin:$PATH
cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
series=("$@")
[ ${#series[@]} -gt 0 ] || series=(2.3 2.1)
log() { printf 'openzfs lane: %5ss  %s\n' "$SECONDS" "$*"; }

work="$(mktemp -d /var/tmp/ferry-openzfs-lane.XXXXXX)"
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT HUP
share="$work/share"
mkdir -p "$share/bin" "$share/src"

# Images first: the first build takes ~15 min per series, and a failed
# one should fail before anything else is spent.
declare -A img
for s in "${series[@]}"; do
  log "image $s"
  img[$s]="$("$here/image.sh" "$s")"
done

log "test binaries"
(
  cd "$repo"
  export CGO_ENABLED=0
  go build -o "$share/bin/ferry" ./cmd/ferry
  go test -c -o "$share/bin/zfs.test" ./adapters/zfs
  go test -c -o "$share/bin/fence.test" ./adapters/fence
  go test -c -o "$share/bin/csi.test" ./adapters/csi
  go test -c -o "$share/bin/mount.test" ./adapters/mount
  go test -c -tags watchdog -o "$share/bin/watchdog.test" ./tests/watchdog
  go test -c -tags replication -o "$share/bin/replication.test" ./tests/replication
  make -s "$cache/tools/csi-sanity" >/dev/null
  cp "$cache/tools/csi-sanity" "$share/bin/csi-sanity"
  git ls-files -z | xargs -0 cp --parents -t "$share/src"
)
install -m 0755 "$here/guest-tests.sh" "$share/guest-tests.sh"

rc=0
for s in "${series[@]}"; do
  plan=full
  [ "$s" = 2.3 ] || plan=short
  plan="${FERRY_OPENZFS_PLAN:-$plan}"
  rm -rf "$share/out"
  printf '#!/bin/sh\nexec sh /share/guest-tests.sh "%s"\n' "$plan" >"$share/run.sh"
  log "booting OpenZFS $s ($(tr '\n' ' ' <"${img[$s]}/versions.txt")), plan $plan"
  start=$SECONDS
  if "$here/boot.sh" "${img[$s]}" "$share" "${FERRY_OPENZFS_TIMEOUT:-80m}"; then run=0; else run=$?; fi
  echo "openzfs $s: $(head -n 2 "$share/out/zfs-version" 2>/dev/null | tr '\n' ' ')($((SECONDS - start)) s in the guest)"
  cat "$share/run.log" 2>/dev/null || true
  for f in "$share"/out/*.rc; do
    [ -f "$f" ] || continue
    name="$(basename "$f" .rc)"
    if [ "$(cat "$f")" != 0 ]; then
      echo "---- openzfs $s: $name failed; its failures:"
      grep -E -e '--- FAIL|^FAIL|Error Trace|Error:|panic:|^\s+\S+_test\.go:[0-9]+:|Failed|\[FAIL\]' "$share/out/$name.log" | head -80 || true
      echo "---- (the log's end)"
      tail -40 "$share/out/$name.log"
    else
      summary="$(grep -cE -e '^--- PASS' "$share/out/$name.log" || true) tests passed"
      [ "$summary" != "0 tests passed" ] || summary="$(grep -oE '[0-9]+ Passed \| [0-9]+ Failed' "$share/out/$name.log" | tail -n 1)"
      echo "openzfs $s: $name ok ($summary)"
    fi
  done
  if [ "$run" != 0 ]; then
    rc=1
    if [ -n "${FERRY_OPENZFS_KEEP:-}" ]; then
      mkdir -p "$FERRY_OPENZFS_KEEP/$s" && cp -a "$share/out" "$share/console.log" "$FERRY_OPENZFS_KEEP/$s/" 2>/dev/null || true
    fi
  fi
done
exit "$rc"
