#!/usr/bin/env bash
# Checks that dependencies point inward: domain imports only the standard
# library; ports only domain and the standard library; app no adapters.
set -euo pipefail
mod=$(go list -m)
fail=0

# Standard-library packages have no dot in their first path element.
nonstd() { grep -E '^[^/]*\.[^/]*/' || true; }

bad=$(go list -deps ./domain/... | nonstd | grep -v "^$mod/domain" || true)
if [ -n "$bad" ]; then echo "domain depends on non-standard packages:"; echo "$bad"; fail=1; fi
io=$(go list -deps ./domain/... | grep -E '^(os/exec|net|net/.*|os/signal|log|log/slog|math/rand.*|crypto/rand)$' || true)
if [ -n "$io" ]; then echo "domain depends on I/O, logging or randomness:"; echo "$io"; fail=1; fi
# Direct imports: the domain touches no files, processes or syscalls itself
# (the standard library's own use of syscall, through time, is fine).
direct=$(go list -f '{{join .Imports "\n"}}' ./domain/... | grep -E '^(os|syscall|io/ioutil|unsafe)$' || true)
if [ -n "$direct" ]; then echo "domain imports I/O packages:"; echo "$direct"; fail=1; fi
clock=$(grep -rn --include='*.go' --exclude='*_test.go' -E 'time\.(Now|Since|Until|Sleep|After|Tick|NewTimer|NewTicker)\(' domain || true)
if [ -n "$clock" ]; then echo "domain reads the clock (time is an input):"; echo "$clock"; fail=1; fi

bad=$(go list -deps ./ports | nonstd | grep -v -E "^$mod/(domain|ports)(/|$)" || true)
if [ -n "$bad" ]; then echo "ports depends on more than the domain:"; echo "$bad"; fail=1; fi

bad=$(go list -deps ./app/... 2>/dev/null | grep -E "^$mod/(adapters|cmd)(/|$)" || true)
if [ -n "$bad" ]; then echo "app depends on adapters or cmd:"; echo "$bad"; fail=1; fi

if [ "$fail" = 0 ]; then echo "lint-layers: domain <- ports <- app <- adapters, cmd: ok"; fi
exit "$fail"
