#!/usr/bin/env bash
# Passes `go test -v` output through, keeping the verbose log short: the
# === RUN lines are dropped; every --- PASS/FAIL line, every t.Log line and
# the final ok/FAIL stay. The exit status is go test's (pipefail).
#
# When a test failed, the last lines it logged before its namespace dump (a
# cluster test prints one at failure) are printed again at the very end:
# CI shows only the output's tail, and the failure's own line must be in it.
set -o pipefail
grep --line-buffered -v -E '^=== (RUN|PAUSE|CONT)' | awk '
	{ print; fflush() }
	/^ *--- FAIL: / {
		nf++
		summary[nf] = "-- " $3
		for (i = 1; i <= 4; i++) if (kept[i] != "") summary[nf] = summary[nf] "\n" kept[i]
	}
	/^ *--- / { for (i = 1; i <= 4; i++) kept[i] = ""; dumping = 0; next }
	# A log entry: "    file_test.go:NN: message" (its continuation lines
	# are indented further and left out).
	/^ +[A-Za-z0-9_]+\.go:[0-9]+: / {
		if ($0 ~ /at failure \(the failure.s line is above\)/) { dumping = 1; next }
		if (dumping) next
		for (i = 1; i < 4; i++) kept[i] = kept[i + 1]
		kept[4] = substr($0, 1, 400)
	}
	END {
		if (nf == 0) exit
		print "== the last lines each failed test logged (its namespace dump left out):"
		for (k = 1; k <= nf; k++) print summary[k]
	}
'
