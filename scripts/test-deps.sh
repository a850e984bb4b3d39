#!/bin/sh
# Installs what the test suite needs beyond npm packages: Debian's Chromium for the browser tests
# (playwright-core drives /usr/bin/chromium; it never downloads a browser of its own). Runs before `npm test`.
set -e
[ -x /usr/bin/chromium ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: /usr/bin/chromium is missing and apt-get is not available: install Chromium first" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "test-deps: installing chromium from Debian's packages (once)" >&2
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
