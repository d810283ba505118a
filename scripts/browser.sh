#!/usr/bin/env bash
# The real browser the console's tests drive (tests/e2e/test_console.py): Debian's chromium,
# installed here when missing and this runs as root with apt-get. Playwright drives it by its
# path (TIKK_CHROMIUM, default /usr/bin/chromium); Playwright's own browser download is not used.
set -euo pipefail
browser=${TIKK_CHROMIUM:-/usr/bin/chromium}
if [ -x "$browser" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  echo "browser: installing chromium for the console's browser tests"
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium > /dev/null
  [ -x "$browser" ] && exit 0
fi
echo "browser: no chromium at $browser; install it (apt-get install chromium) or set TIKK_CHROMIUM" >&2
exit 1
