#!/usr/bin/env bash
# Installs the Debian packages given as arguments when any is missing, and the
# npm packages of tests/package.json when tests/node_modules is absent.
set -euo pipefail
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
# Node.js may come from Debian or from elsewhere (NodeSource's nodejs ships
# its own npm, which Debian's npm package conflicts with): only the commands
# matter.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -f "$root/tests/package.json" ] && [ ! -d "$root/tests/node_modules" ]; then
    echo "deps: npm install in tests/"
    (cd "$root/tests" && npm install --no-audit --no-fund --loglevel=error)
fi
