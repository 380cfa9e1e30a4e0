#!/usr/bin/env bash
# Every alert's runbook_url names a section of docs/runbook.md (GitHub's
# anchor of a "## <AlertName>" heading), and every alert has its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
rules=deploy/helm/ferry/alerts/ferry.rules.yaml
fail=0
for a in $(sed -n 's/^ *- alert: *//p' "$rules"); do
  anchor="$(echo "$a" | tr '[:upper:]' '[:lower:]')"
  if ! grep -q "runbook.md#$anchor\"" "$rules"; then
    echo "runbook-links: alert $a has no runbook_url ending in #$anchor"; fail=1
  fi
  if ! grep -qx "## $a" docs/runbook.md; then
    echo "runbook-links: docs/runbook.md has no section \"## $a\""; fail=1
  fi
done
[ "$fail" = 0 ] && echo "runbook-links: every alert has its runbook section"
exit "$fail"
