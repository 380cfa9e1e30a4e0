#!/usr/bin/env bash
# lane.sh [SERIES...]: the OpenZFS lane (issue 24). For each series (2.3,
# 2.1; both by default, side by side) it builds or reuses the guest image
# (image.sh) and boots the guest (boot.sh) to run guest-tests.sh there on
# the test binaries built once on the host (static, no cgo) and the
# project's files, shared by 9p; then prints the OpenZFS version and every
# suite's result. 2.3 runs every suite; 2.1 the short plan (the contract suite,
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

# The test binaries first (a minute), then each series on its own: its
# image built or reused, then its guest booted with its own share. The
# series run side by side, so a fresh machine's second image builds while
# the first guest runs, and a guest that waits (the tests poll) leaves the
# cores to the other; image.sh builds one image at a time (a lock).
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

# one SERIES: image, then guest; writes $work/SERIES.report and .rc.
one() {
  local s="$1" plan img start run
  local sh="$work/share-$s" report="$work/$s.report"
  plan=full
  [ "$s" = 2.3 ] || plan=short
  plan="${FERRY_OPENZFS_PLAN:-$plan}"
  log "image $s"
  if ! img="$("$here/image.sh" "$s" 2>"$work/$s.image.log")"; then
    { echo "openzfs $s: the image failed to build:"; tail -30 "$work/$s.image.log"; } >"$report"
    echo 1 >"$work/$s.rc"
    return
  fi
  cp -al "$share" "$sh"
  printf '#!/bin/sh\nexec sh /share/guest-tests.sh "%s"\n' "$plan" >"$sh/run.sh"
  log "booting OpenZFS $s ($(tr '\n' ' ' <"$img/versions.txt")), plan $plan"
  start=$SECONDS
  if "$here/boot.sh" "$img" "$sh" "${FERRY_OPENZFS_TIMEOUT:-80m}" 2>"$work/$s.boot.log"; then run=0; else run=$?; fi
  log "OpenZFS $s done: $((SECONDS - start)) s in the guest"
  {
    echo "openzfs $s: $(head -n 2 "$sh/out/zfs-version" 2>/dev/null | tr '\n' ' ')($((SECONDS - start)) s in the guest)"
    cat "$work/$s.boot.log"
    cat "$sh/run.log" 2>/dev/null || true
    for f in "$sh"/out/*.rc; do
      [ -f "$f" ] || continue
      name="$(basename "$f" .rc)"
      if [ "$(cat "$f")" != 0 ]; then
        echo "---- openzfs $s: $name failed; its failures:"
        grep -E -e '--- FAIL|^FAIL|Error Trace|Error:|panic:|^\s+\S+_test\.go:[0-9]+:|Failed|\[FAIL\]' "$sh/out/$name.log" | head -80 || true
        echo "---- (the log's end)"
        tail -40 "$sh/out/$name.log"
      else
        summary="$(grep -cE -e '^--- PASS' "$sh/out/$name.log" || true) tests passed"
        [ "$summary" != "0 tests passed" ] || summary="$(grep -oE '[0-9]+ Passed \| [0-9]+ Failed' "$sh/out/$name.log" | tail -n 1)"
        echo "openzfs $s: $name ok ($summary)"
      fi
      # Figures the suites print (bytes, not times: timings under
      # emulation mean nothing), e.g. the stream features' saving.
      grep -hoE 'stream bytes of .*' "$sh/out/$name.log" 2>/dev/null | sed "s/^/openzfs $s: $name: /" || true
    done
  } >"$report"
  if [ "$run" != 0 ] && [ -n "${FERRY_OPENZFS_KEEP:-}" ]; then
    mkdir -p "$FERRY_OPENZFS_KEEP/$s" && cp -a "$sh/out" "$sh/console.log" "$FERRY_OPENZFS_KEEP/$s/" 2>/dev/null || true
  fi
  echo "$run" >"$work/$s.rc"
}

pids=()
for s in "${series[@]}"; do
  one "$s" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
rc=0
for s in "${series[@]}"; do
  cat "$work/$s.report" 2>/dev/null || echo "openzfs $s: no report"
  [ "$(cat "$work/$s.rc" 2>/dev/null)" = 0 ] || rc=1
done
exit "$rc"
