#!/usr/bin/env bash
# Runs the examples of the README and docs/: every ```sh block after a
# `<!-- tested: NAME -->` line, in a scratch folder that sees the repository's build/, samples/,
# examples/ and proto/; and every block after `<!-- output: COMMAND -->` is
# compared with what COMMAND prints, times aside.
#   run.sh REPO BUILD_DIR
set -euo pipefail
repo=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
work=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
ln -s "$build" "$work/build"
for d in samples examples proto client CMakeLists.txt; do ln -s "$repo/$d" "$work/$d"; done
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export IMGSTAT_LISTEN=127.0.0.1:$port IMGSTAT_SERVER=127.0.0.1:$port

# The blocks, as files: tested.NAME.sh and output.N.{cmd,txt}.
/usr/bin/python3 - "$work" "$repo/README.md" "$repo"/docs/*.md <<'PY'
import re, sys
text = "".join(open(f).read() for f in sys.argv[2:])
for n, (kind, arg, body) in enumerate(re.findall(r"<!-- (tested|output): (.*?) -->\n```\w*\n(.*?)```", text, re.S)):
    if kind == "tested":
        open(f"{sys.argv[1]}/tested.{n:02d}.{arg}.sh", "w").write(body)
    else:
        open(f"{sys.argv[1]}/output.{n:02d}.cmd", "w").write(arg + "\n")
        open(f"{sys.argv[1]}/output.{n:02d}.txt", "w").write(body)
PY
ls "$work"/tested.*.sh >/dev/null

failures=0
# docs/reference.md names every flag both programs take.
for program in build/server/imgstat-server build/client/imgstat-client; do
  for flag in $("$build/${program#build/}" --help | grep -oE '^ +(-[a-z], ?)?--[a-z][a-z-]*' | grep -oE -- '--[a-z-]+'); do
    [ "$flag" = --help ] || [ "$flag" = --version ] || grep -qF -- "\`$flag" "$repo/docs/reference.md" ||
      { echo "docs/reference.md does not name ${program##*/} $flag"; failures=$((failures + 1)); }
  done
done

/usr/bin/python3 "$repo/tests/readme/links.py" "$repo" || failures=$((failures + 1))

normalize() { sed -E 's/(decode|compute|check) [0-9.]+ ms/\1 T ms/g'; }
cd "$work"
for block in tested.*.sh output.*.cmd; do
  name=${block#*.}
  if [[ $block == output.* ]]; then
    want=${block%.cmd}.txt
    if ! diff <(bash "$block" 2>&1 | normalize) <(normalize <"$want") >"$work/diff"; then
      echo "README output of $(cat "$block") differs:"; cat "$work/diff"; failures=$((failures + 1))
    else
      echo "ok: output of $(cat "$block")"
    fi
    continue
  fi
  # Blocks other than the one that starts its own server need one running.
  if ! grep -q 'imgstat-server &' "$block" && [ -z "$server_pid" ]; then
    build/server/imgstat-server --threads 2 >"$work/server.log" 2>&1 &
    server_pid=$!
    until build/client/imgstat-client --health >/dev/null 2>&1; do sleep 0.2; done
  fi
  if timeout 300 bash -euo pipefail "$block" >"$work/out" 2>&1 && [ -s "$work/out" ]; then
    echo "ok: $name ($(wc -l <"$work/out") lines)"
  else
    echo "README example $name failed:"; sed 's/^/  /' "$work/out" | tail -30; failures=$((failures + 1))
  fi
done
exit $((failures > 0))
