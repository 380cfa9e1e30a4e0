#!/usr/bin/env bash
# Passes `go test -v` output through, keeping the verbose log short: the
# === RUN lines are dropped; every --- PASS/FAIL line, every t.Log line and
# the final ok/FAIL stay. The exit status is go test's (pipefail).
set -o pipefail
grep -v -E '^=== (RUN|PAUSE|CONT)'
