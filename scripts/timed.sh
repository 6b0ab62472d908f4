#!/usr/bin/env bash
# timed.sh NAME COMMAND...: runs one set-up step and, where it did real work (2 s or more), says
# how long it took, so a first run shows where its minutes went (make fresh-check collects these
# lines into its table). A warm run, where each step finds its work done, prints nothing.
set -uo pipefail
name=$1; shift
start=$(date +%s)
"$@"
rc=$?
took=$(( $(date +%s) - start ))
if [ "$took" -ge 2 ] || [ "$rc" -ne 0 ]; then
  echo "railyard: set-up step '$name' took $took s$([ "$rc" -eq 0 ] || echo ", exit $rc")" >&2
fi
exit "$rc"
