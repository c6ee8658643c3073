#!/usr/bin/env bash
# The Python package's tests, as a user gets it: a virtual environment over
# Debian's packages, `pip install` of client/python from the tree (no
# index), then pytest against live servers.
#   run.sh SERVER_BIN CLIENT_BIN WORK
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
server_bin=$(realpath "$1") client_bin=$(realpath "$2") work=$(realpath -m "$3")
python=/usr/bin/python3
for module in venv ensurepip pytest grpc numpy PIL; do
  if ! "$python" -c "import $module" 2>/dev/null; then
    echo "skipped: $python has no $module (scripts/install-deps installs it)"
    exit 77
  fi
done
rm -rf "$work" && mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-index --quiet "$here/.." 2>&1 | grep -v "^\[notice\]" || true
"$work/venv/bin/python" -c "import imgstat, sys; print('imgstat', imgstat.__version__, 'from', imgstat.__file__)"
cd "$here"
IMGSTAT_SERVER_BIN=$server_bin IMGSTAT_CLIENT_BIN=$client_bin \
  exec "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$here" "${@:4}"
