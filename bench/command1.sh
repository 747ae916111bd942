#!/bin/bash
# README command 1, timed as the README's "How long" reports it: a new venv and the install, then the main job
# `--quick` on an empty tracekern cache and no cached math library (as on a fresh machine), Python writing its
# .pyc files. Run from the repository root on a quiet machine: bash bench/command1.sh [OUTDIR]
# (it replaces .venv; the main job's JSON, with each measuring process's wall and CPU seconds, goes to OUTDIR).
set -e
OUT=${1:-/tmp/command1}; mkdir -p "$OUT"
unset PYTHONDONTWRITEBYTECODE
( while true; do uptime >> "$OUT/load.log"; sleep 15; done ) & LOAD=$!
trap 'kill $LOAD' EXIT
rm -rf .venv
/usr/bin/time -f "install wall %e s" -o "$OUT/install.time" \
    bash -c 'python3 -m venv .venv && .venv/bin/pip install -q --no-compile -e ".[bench]"'
rm -f tracekern/backends/__pycache__/*.nb[ic]          # the math library's machine code, compiled again
export TRACEKERN_CACHE_DIR=$(mktemp -d /tmp/tkc1.XXXX)   # an empty tracekern cache
export MPLCONFIGDIR=$(mktemp -d /tmp/mpl1.XXXX)            # and no font cache of matplotlib's (0.2 s to build)
/usr/bin/time -f "main job wall %e s, user %U s, sys %S s" -o "$OUT/main.time" \
    .venv/bin/python -m bench --quick --json "$OUT/command1-quick.json" --plot "$OUT/command1-quick.png" \
    > "$OUT/main.out" 2> "$OUT/main.err"
cat "$OUT/install.time" "$OUT/main.time"
