#!/bin/sh
# Installs what the test suite needs beyond npm packages, once, from Debian's packages; runs before `npm test`:
# - Chromium for the browser tests (playwright-core drives /usr/bin/chromium; it never downloads a browser);
# - the PostgreSQL server binaries (initdb, pg_ctl) for the tests that start a private cluster of their own
#   (failover, streaming replica). Binaries only: no cluster is created or started, and no server on 5432 is used.
set -e

# The server binaries, found as testkit/pg-cluster.ts finds them: pg_config --bindir, the PATH, /usr/lib/postgresql.
has_pg() {
  dir=$(pg_config --bindir 2>/dev/null || true)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && return 0
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
  for dir in /usr/lib/postgresql/*/bin; do
    [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && return 0
  done
  return 1
}

PACKAGES=""
[ -x /usr/bin/chromium ] || PACKAGES="chromium fonts-liberation"
has_pg || PACKAGES="$PACKAGES postgresql"
[ -z "$PACKAGES" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: missing$PACKAGES and apt-get is not available: install Chromium (/usr/bin/chromium) and the PostgreSQL server binaries (initdb, pg_ctl) first" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
case "$PACKAGES" in
*postgresql*)
  # Debian's package would create and start a "main" cluster on 5432: the tests need only the binaries.
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/test-deps.conf >/dev/null
  ;;
esac
echo "test-deps: installing$PACKAGES from Debian's packages (once)" >&2
$SUDO apt-get update -qq >/dev/null
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
