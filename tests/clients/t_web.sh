#!/usr/bin/env bash
# t_web.sh — the fill-mask service example examples/web (tests/clients/node/t_web.js):
# POST /predict against fill_candidates and the examples of its README, its 400/404/405/413 errors, 127.0.0.1
# only; then its WebUI in headless Debian Chromium (apt-get install chromium):
# type a sentence, press Enter, check the rendered candidates and bars.  Without
# Node/better-sqlite3 the suite is skipped; without Chromium only the browser
# part is, each with the reason.  Screenshot: $BUILD/web/webui.png
# (WEB_SCREENSHOT=docs/webui.png bash tests/clients/t_web.sh refreshes the one in docs/).
set -u
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}
export BERTFILL_EXT=${BERTFILL_EXT:-./bertfill}
if [ ! -f model/bertfill-zh-tiny/model.safetensors ]; then echo "skip web: the shipped model is missing"; exit 0; fi
mkdir -p "$BUILD"
if ! bash tests/clients/node/install.sh 2>"$BUILD/node-install.err"; then
  echo "skip web: better-sqlite3 unavailable: $(tail -n1 "$BUILD/node-install.err")"; exit 0
fi
export CHROMIUM=${CHROMIUM-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$CHROMIUM" ] || export CHROMIUM_MISSING="no Chromium (Debian: apt-get install chromium)"
unset BERTFILL_MODEL
exec node tests/clients/node/t_web.js
