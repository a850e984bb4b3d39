#!/bin/sh
# Runs bun with the given arguments, first installing Bun (from npm, into .tools/) and the
# project's dependencies when they are missing. Needs only Node and npm.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
BUN_VERSION=1.4.5
if command -v bun >/dev/null 2>&1; then
  BUN=$(command -v bun)
elif [ -x "$root/.tools/node_modules/.bin/bun" ]; then
  BUN="$root/.tools/node_modules/.bin/bun"
else
  echo "bun not found: installing bun@$BUN_VERSION from npm into .tools/" >&2
  npm install --prefix "$root/.tools" --no-save --no-audit --no-fund "bun@$BUN_VERSION" >&2
  BUN="$root/.tools/node_modules/.bin/bun"
fi
# Child processes (tests, dev) call `bun` by name.
PATH="$(dirname "$BUN"):$PATH"
export PATH
stamp="$root/node_modules/.install-stamp"
if [ ! -f "$stamp" ] || [ "$root/bun.lock" -nt "$stamp" ] || [ "$root/package.json" -nt "$stamp" ]; then
  (cd "$root" && "$BUN" install --frozen-lockfile >&2)
  touch "$stamp"
fi
# Bun's allocator (mimalloc) hands freed memory back to the OS 100 ms after it is freed, so a process that allocates
# in bursts (the indexer's batches: megabytes of JSON, rows, COPY text) page-faults the same memory in again and
# again: a quarter of the service's CPU during a backfill (docs/benchmarks.md). Freed memory is kept 10 s for reuse
# instead; an idle process still returns it.
MIMALLOC_PURGE_DELAY=${MIMALLOC_PURGE_DELAY:-10000}
export MIMALLOC_PURGE_DELAY
# JavaScriptCore sizes its collections to the machine's RAM: on a host with gigabytes it lets the heap grow far between
# collections, and the indexer's batches (garbage within a second) took the service past 550 MB RSS during a long
# backfill. The service is told 512 MiB instead and collects sooner, at no measured cost in time
# (docs/operations.md, "Memory"); other commands (tests, tools) keep JavaScriptCore's own sizing.
case " $* " in
*" src/main.ts "* | *" src/cli/dev.ts "*)
  BUN_JSC_forceRAMSize=${BUN_JSC_forceRAMSize:-536870912}
  export BUN_JSC_forceRAMSize
  ;;
esac
cd "$root"
exec "$BUN" "$@"
