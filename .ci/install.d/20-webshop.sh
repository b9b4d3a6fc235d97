#!/usr/bin/env bash
# WebShop (envkit/WebShop-v0, envkit/WebShopBrowser-v0): the `webshop` / `browser` extras (bm25s, rapidfuzz,
# PyStemmer, selenium) and Debian's Chromium + chromedriver (00-apt.sh), then a smoke check that headless
# Chromium starts offline and serves the shop. No data download: the embedded catalog is the default.
source "$(dirname "$0")/lib.sh"
have_modules bm25s rapidfuzz Stemmer selenium || pip_install -e "$REPO[webshop,browser]"
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  skip "WebShopBrowser (Chromium)" "chromium / chromedriver not on PATH (apt-get install chromium chromium-driver, as root)"
fi
"$PY" - <<'PY'
import time

from envs.webshop.browser import WebShopBrowserEnv

t = time.perf_counter()
env = WebShopBrowserEnv()
try:
    obs, info = env.reset(seed=0)
    assert info["admissible_actions"] == ["search[<your query>]"], info
finally:
    env.close()
print(f"webshop: headless Chromium served the shop in {time.perf_counter() - t:.1f} s")
PY
