#!/bin/sh
# guest-tests.sh PLAN: runs inside the OpenZFS guest (lane.sh copies it to
# the 9p share as run.sh). The test binaries were built on the host into
# /share/bin, the project's files copied to /share/src; each suite runs in
# its package's directory with CI=1 (a real-ZFS test never skips) and
# writes /share/out/NAME.log and NAME.rc.
plan="${1:-full}"
export CI=1 HOME=/root TMPDIR=/tmp PATH=/usr/sbin:/usr/bin:/sbin:/bin
export FERRY_BIN=/share/bin/ferry
# The replication tests' waits, stretched: emulation runs them 10 to 20
# times slower, at the lowest priority beside CI's cluster stages.
export FERRY_TEST_TIMESCALE=6
out=/share/out
mkdir -p "$out"
{ zfs version; uname -r; } >"$out/zfs-version" 2>&1
fails=0
suite() {
  name="$1" dir="$2"
  shift 2
  start=$(date +%s)
  (cd "/share/src/$dir" && "$@") >"$out/$name.log" 2>&1
  rc=$?
  echo "$rc" >"$out/$name.rc"
  echo "$name: rc $rc in $(($(date +%s) - start)) s"
  [ "$rc" = 0 ] || fails=$((fails + 1))
}
t() { echo "/share/bin/$1.test" -test.v -test.count=1 -test.timeout 60m; }
# PLAN "full" runs every suite, "short" the contract suite, fences and
# the resume, space and rollback scenarios; else it is a
# list of suite names (zfs fence sanity csi mount watchdog replication).
case "$plan" in
full) plan="zfs fence sanity csi mount watchdog replication" ;;
short) plan="zfs fence replication-short" ;;
esac
for name in $plan; do
  case "$name" in
  zfs | fence | csi | mount) suite "$name" "adapters/$name" $(t "$name") ;;
  sanity) suite sanity . bash tests/sanity/run.sh /share/bin/ferry /share/bin/csi-sanity ;;
  watchdog) suite watchdog tests/watchdog $(t watchdog) ;;
  replication) suite replication tests/replication $(t replication) ;;
  replication-short) suite replication tests/replication $(t replication) -test.run 'KilledMidStream|PoolIsFull|Diverged' ;;
  *) echo "unknown suite $name"; fails=$((fails + 1)) ;;
  esac
done
zpool list -H 2>/dev/null | sed 's/^/pool left: /'
echo "failed suites: $fails"
[ "$fails" = 0 ]
