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
# JavaScriptCore sizes its collections to the machine's RAM and lets the heap double between them: the indexer's
# batches (megabytes of JSON, rows and COPY text, garbage within a second) then took the service past 450 MB RSS
# during a long backfill. The service is told 512 MiB of RAM, its heap grows 1.3 x between collections instead of 2 x,
# and Bun's allocator (mimalloc) returns freed memory at once: a 500,000-event backfill peaks at 260-270 MB instead of
# 450-460 for about 15 % more time and 35 % more CPU (docs/operations.md, "Memory"). Other commands (tests, tools) keep
# JavaScriptCore's own sizing, and the allocator keeps their freed memory 10 s for reuse (allocating in bursts, a
# process otherwise page-faults the same memory in again and again). The environment's values win.
case " $* " in
*" src/main.ts "* | *" src/cli/dev.ts "*)
  service=1
  BUN_JSC_forceRAMSize=${BUN_JSC_forceRAMSize:-536870912}
  BUN_JSC_smallHeapGrowthFactor=${BUN_JSC_smallHeapGrowthFactor:-1.3}
  export BUN_JSC_forceRAMSize BUN_JSC_smallHeapGrowthFactor
  ;;
*) service= ;;
esac
# The delay this launcher picked is exported beside it, so a launcher started beneath it (a test or a benchmark
# starting the service) tells its own default from one the operator set.
if [ -z "${MIMALLOC_PURGE_DELAY-}" ] || [ "$MIMALLOC_PURGE_DELAY" = "${BUN_SH_PURGE_DELAY_DEFAULT-}" ]; then
  if [ -n "$service" ]; then MIMALLOC_PURGE_DELAY=0; else MIMALLOC_PURGE_DELAY=10000; fi
  BUN_SH_PURGE_DELAY_DEFAULT=$MIMALLOC_PURGE_DELAY
  export BUN_SH_PURGE_DELAY_DEFAULT
fi
export MIMALLOC_PURGE_DELAY
cd "$root"
exec "$BUN" "$@"
