"""WebShop (Yao et al. 2022) without Java, spaCy or downloads: ``envkit/WebShop-v0`` and ``envkit/WebShopBrowser-v0``.

Modules: `catalog` (real data files and the embedded generated catalog), `generated` (the generator), `search`
(BM25 with bm25s), `reward` (WebShop's score), `shop` (pages and transitions), `render` (observations), `env`
(the text env), `server` (the web app on 127.0.0.1), `browser` (the Chromium env). See docs/webshop.md.
"""
