#!/usr/bin/env bash
# Opens Chrome trace files in the real viewers, speedscope and Chromium's DevTools Performance
# panel, headless, and prints what each said (tools/trace/viewer_check/check_viewers.js).
# Exit 1 when speedscope warns (a span that does not nest on its row) or a viewer fails.
# Not part of CI: it installs Debian's chromium and two npm packages (speedscope,
# playwright-core) into build/viewer-check/. Screenshots land there too.
# Usage: scripts/check-trace-viewers.sh TRACE.json...
#   e.g. KOLO_TIMELINE=/tmp/tl.json build/bin/kolorun -np 2 build/bin/train_fashion_mnist \
#          --epochs 1 --train-subset 4096 && build/bin/kolo-trace merge -o /tmp/merged.json \
#          /tmp/tl.rank0.json /tmp/tl.rank1.json && scripts/check-trace-viewers.sh /tmp/merged.json
set -euo pipefail
(($#)) || { sed -n '2,10p' "$0"; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/build/viewer-check"
mkdir -p "$work/www/traces"

if ! command -v chromium >/dev/null; then
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    chromium >/dev/null
fi
[[ -d "$work/node_modules/speedscope" && -d "$work/node_modules/playwright-core" ]] ||
  (cd "$work" && npm install --silent --no-save speedscope@1.25.0 playwright-core >/dev/null)
cp -r "$work/node_modules/speedscope/dist/release/." "$work/www/"
traces=()
for t in "$@"; do
  cp "$t" "$work/www/traces/" && traces+=("$(realpath "$t")")
done

# speedscope loads a profile from a URL; DevTools' frontend is served by a Chromium started
# with remote debugging (the bundled devtools:// pages cannot be opened from a page).
port_http=18765 port_devtools=19333
python3 -m http.server "$port_http" --bind 127.0.0.1 --directory "$work/www" >/dev/null 2>&1 &
server=$!
chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
  --remote-debugging-port="$port_devtools" --user-data-dir="$work/profile" about:blank \
  >/dev/null 2>&1 &
browser=$!
trap 'kill $server $browser 2>/dev/null' EXIT
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port_devtools/json/version" >/dev/null &&
    curl -sf "http://127.0.0.1:$port_http/index.html" >/dev/null && break
  sleep 0.2
done
NODE_PATH="$work/node_modules" node "$root/tools/trace/viewer_check/check_viewers.js" \
  "http://127.0.0.1:$port_http" "$port_devtools" "$work" "${traces[@]}"
