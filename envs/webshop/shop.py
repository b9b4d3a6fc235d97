"""The shop's pages and transitions, shared by the text env and the web app behind the browser env.

A page is a `ShopState` (an immutable value: page kind, query, page number, result list, item, chosen
options, sub-page, visited items, score). `page_elements` lists what the page shows (text, buttons, product
links, option radios, the search box); `transition` applies ``search[...]`` / ``click[...]`` and says why an
action is invalid instead of raising. The web app links every button to the URL (`state_path`) of the state
that `transition` gives for clicking it, so both envs follow the same rules by construction.

Pages and buttons follow upstream WebShop's text env: search -> results (``Back to Search``, ``< Prev``,
``Next >``, product ASINs) -> item (option values, ``Description``, ``Features``, ``Reviews``, ``Buy Now``,
``< Prev`` back to the results) -> sub-page (``< Prev`` back to the item) -> done. Clickable names are matched
case-insensitively (upstream lower-cases them). Deviations, on purpose: ``search[...]`` is available only on the
search page (where the search box is; upstream silently accepts it anywhere), ``click[search]`` is refused
(upstream ignores it), and brackets inside an argument or an empty query are invalid actions (upstream ignores or
crashes on some of them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlencode

from envkit.envs.webshop.products import Catalog, WebShopGoal
from envkit.envs.webshop.scoring import DEFAULT_REWARD_MODE, get_reward
from envkit.envs.webshop.search import RESULTS_PER_PAGE

if TYPE_CHECKING:
    from envkit.envs.webshop.search import SearchEngine

SUB_PAGES = ("description", "features", "reviews")
BACK, PREV, NEXT, BUY = "back to search", "< prev", "next >", "buy now"
_LABELS = {BACK: "Back to Search", PREV: "< Prev", NEXT: "Next >", BUY: "Buy Now"}
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.S | re.I)
MAX_QUERY_CHARS = 300


def search_query(text: str) -> str:
    """A valid ``search[...]`` argument from free text: brackets removed, lower case, whitespace collapsed, cut at a
    word boundary to `MAX_QUERY_CHARS` (the goal oracle searches for the instruction this way)."""
    q = " ".join(re.sub(r"[\[\]]", " ", text).lower().split())
    return q[:MAX_QUERY_CHARS].rsplit(" ", 1)[0] if len(q) > MAX_QUERY_CHARS else q


SEARCH_PLACEHOLDER = "search[<your query>]"


@dataclass(frozen=True)
class ShopState:
    """Where the shopper is. Immutable: transitions return a new state."""

    page: str = "search"
    query: str = ""
    page_num: int = 1
    results: tuple[str, ...] = ()
    asin: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    sub: str | None = None
    visited: tuple[str, ...] = ()
    score: float | None = None

    def options_dict(self) -> dict[str, str]:
        return dict(self.options)


@dataclass(frozen=True)
class Element:
    """One thing on a page.

    Attributes:
        kind: ``text``, ``button``, ``link`` (a product ASIN), ``option`` (a radio value), ``option_name``
            (an option group heading) or ``search_box``.
        text: What is shown (whitespace-normalised).
        key: The ``click[...]`` name (lower-case) for clickables, else ``""``.
        marked: Option chosen / product visited (text_rich shows it as ``[clicked button]``).
        group: The option group of an ``option``.
    """

    kind: str
    text: str
    key: str = ""
    marked: bool = False
    group: str = ""


def _t(text: str) -> Element:
    return Element("text", " ".join(str(text).split()))


def _b(key: str) -> Element:
    return Element("button", _LABELS.get(key, key.title()), key)


def page_elements(state: ShopState, catalog: Catalog, goal: WebShopGoal) -> tuple[Element, ...]:
    """What `state`'s page shows, in reading order."""
    instr = [_t("Instruction:"), _t(goal.instruction_text)]
    if state.page == "search":
        return (_t("WebShop"), *instr, Element("search_box", ""), Element("button", "Search", "search"))
    if state.page == "done":
        p = catalog.by_asin[state.asin or ""]
        opts = ", ".join(f"{k}: {v}" for k, v in state.options) or "none"
        return (
            _t("Thank you for shopping with us!"),
            *instr,
            _t("Purchased:"),
            _t(p.asin),
            _t(p.title),
            _t(f"Options: {opts}"),
            _t("Your score (min 0.0, max 1.0)"),
            _t(repr(float(state.score or 0.0))),
        )
    out = [*instr, _b(BACK)]
    if state.page == "results":
        n = len(state.results)
        out.append(_t(f"Page {state.page_num} (Total results: {n})"))
        if state.page_num > 1:
            out.append(_b(PREV))
        if state.page_num * RESULTS_PER_PAGE < n:
            out.append(_b(NEXT))
        lo = (state.page_num - 1) * RESULTS_PER_PAGE
        for asin in state.results[lo : lo + RESULTS_PER_PAGE]:
            p = catalog.by_asin[asin]
            out += [Element("link", asin, asin.lower(), asin in state.visited), _t(p.title), _t(p.price_tag)]
        return tuple(e for e in out if e.text or e.kind == "search_box")
    p = catalog.by_asin[state.asin or ""]
    out.append(_b(PREV))
    if state.page == "item":
        chosen = state.options_dict()
        for name, values in p.options:
            out.append(Element("option_name", " ".join(name.split()), "", False, name))
            out += [
                Element("option", " ".join(v.split()), " ".join(v.split()), chosen.get(name) == v, name) for v in values
            ]
        out += [_t(p.title), _t(f"Price: {p.price_tag}"), _t(f"Rating: {p.rating}")]
        out += [_b(s) for s in SUB_PAGES] + [_b(BUY)]
    elif state.sub == "description":
        out.append(_t(p.description))
    elif state.sub == "features":
        out += [_t(b) for b in p.bullet_points]
    elif state.sub == "reviews":
        for score, body in p.reviews:
            out += [_t(f"Rating: {score} out of 5"), _t(body)]
    return tuple(e for e in out if e.text)


def clickables(elements: tuple[Element, ...]) -> tuple[str, ...]:
    """The ``click[...]`` names on a page (``search`` excluded: use ``search[...]``), without duplicates."""
    seen: dict[str, None] = {}
    for e in elements:
        if e.key and e.key != "search":
            seen.setdefault(e.key, None)
    return tuple(seen)


def admissible_actions(state: ShopState, elements: tuple[Element, ...]) -> list[str]:
    """verl-agent's format: ``search[<your query>]`` when there is a search box, then ``click[name]``."""
    acts = [SEARCH_PLACEHOLDER] if state.page == "search" else []
    return acts + [f"click[{k}]" for k in clickables(elements)]


def normalize_query(text: str) -> str:
    """Lower-cased, whitespace-collapsed query (upstream lower-cases and splits on spaces)."""
    return " ".join(text.lower().split())


def check_action(action: str, page: str, elements: tuple[Element, ...]) -> tuple[str, str, str | None]:
    """Validate `action` against a page: ``(verb, query or click name, None)`` or ``("", "", why invalid)``."""
    m = _ACTION.match(action)
    if m is None:
        return "", "", "actions are search[your query] or click[button name]"
    verb, arg = m.group(1).lower(), m.group(2)
    if page == "done":
        return "", "", "the purchase is done; reset the env for a new episode"
    if verb == "search":
        if not any(e.kind == "search_box" for e in elements):
            return "", "", "search is only available on the search page: click[back to search] first"
        if "[" in arg or "]" in arg:
            return "", "", "brackets are not allowed inside search[...]"
        query = normalize_query(arg)
        if not query:
            return "", "", "the search query is empty"
        if len(query) > MAX_QUERY_CHARS:
            return "", "", f"the search query is longer than {MAX_QUERY_CHARS} characters"
        return verb, query, None
    key = " ".join(arg.lower().split())
    if key == "search":
        return "", "", "to search, use search[your query]"
    if key not in clickables(elements):
        return "", "", f"there is no button '{key}' on this page"
    return verb, key, None


def transition(
    state: ShopState,
    action: str,
    catalog: Catalog,
    goal: WebShopGoal,
    engine: SearchEngine,
    reward_mode: str = DEFAULT_REWARD_MODE,
) -> tuple[ShopState, str | None]:
    """Apply `action`; returns ``(new state, None)`` or ``(state, why it is invalid)``."""
    verb, arg, why = check_action(action, state.page, page_elements(state, catalog, goal))
    if why is not None:
        return state, why
    if verb == "search":
        return ShopState("results", arg, 1, engine.search(arg), visited=state.visited), None
    return click(state, arg, catalog, goal, reward_mode), None


def click(
    state: ShopState, key: str, catalog: Catalog, goal: WebShopGoal, reward_mode: str = DEFAULT_REWARD_MODE
) -> ShopState:
    """The state after clicking `key` (assumed present on the page); a purchase is scored with `reward_mode`."""
    if key == BACK:
        return ShopState()
    if key == NEXT:
        return replace(state, page_num=state.page_num + 1)
    if key == PREV:
        if state.page == "results":
            return replace(state, page_num=state.page_num - 1)
        if state.page == "item":
            return replace(state, page="results", asin=None, options=())
        return replace(state, page="item", sub=None)
    if key in SUB_PAGES:
        return replace(state, page="sub", sub=key)
    if key == BUY:
        p = catalog.by_asin[state.asin or ""]
        info = get_reward(p, goal, catalog.prices[p.asin], state.options_dict(), reward_mode)
        return replace(state, page="done", score=info.score)
    if state.page == "results":
        asin = key.upper()
        visited = state.visited if asin in state.visited else tuple(sorted((*state.visited, asin)))
        return replace(state, page="item", asin=asin, options=(), visited=visited)
    # an option value on the item page: the last group holding it, as upstream's radio lookup
    found = ("", key)
    for name, values in catalog.by_asin[state.asin or ""].options:
        for v in values:
            if " ".join(v.split()) == key:
                found = (name, v)
    opts = dict(state.options)
    opts[found[0]] = found[1]
    return replace(state, options=tuple(opts.items()))


# ----- URLs of the web app (the browser env) -----------------------------------------------------------------
def state_path(state: ShopState) -> str:
    """The URL path + query of `state` (without the ``/<session>`` prefix; visited items live in the session)."""
    if state.page == "search":
        return "/"
    q: dict[str, str] = {"q": state.query, "p": str(state.page_num)}
    if state.page == "results":
        return "/results?" + urlencode(q)
    q["asin"] = state.asin or ""
    q["o"] = json.dumps(list(state.options))
    if state.page == "sub":
        q["tab"] = state.sub or ""
    if state.page == "done":
        return "/done?" + urlencode(q)
    return f"/{state.page}?" + urlencode(q)


def relative_href(path: str) -> str:
    """`state_path` as a link relative to any page of the session (pages live at ``/<session>/<page>``)."""
    return "./" if path == "/" else path.lstrip("/")


def state_from_path(
    path: str,
    query_string: str,
    visited: tuple[str, ...],
    catalog: Catalog,
    goal: WebShopGoal,
    engine: SearchEngine,
    reward_mode: str = DEFAULT_REWARD_MODE,
) -> ShopState:
    """Invert `state_path` (results are recomputed by the same search); raises ValueError on a bad URL."""
    q = {k: v[0] for k, v in parse_qs(query_string, keep_blank_values=True).items()}
    page = path.strip("/") or "search"
    if page == "search":
        return ShopState(visited=visited)
    query = normalize_query(q.get("q", ""))
    page_num = int(q.get("p", "1"))
    results = engine.search(query) if query else ()
    if page_num < 1 or (page_num - 1) * RESULTS_PER_PAGE > max(len(results) - 1, 0):
        raise ValueError(f"page {page_num} is out of range")
    if page == "results":
        return ShopState("results", query, page_num, results, visited=visited)
    asin = q.get("asin", "")
    if asin not in catalog.by_asin:
        raise ValueError(f"unknown product {asin!r}")
    options = tuple((str(k), str(v)) for k, v in json.loads(q.get("o", "[]")))
    state = ShopState("item", query, page_num, results, asin, options, None, visited)
    if page == "item":
        return state
    if page == "sub" and q.get("tab") in SUB_PAGES:
        return replace(state, page="sub", sub=q["tab"])
    if page == "done":
        p = catalog.by_asin[asin]
        score = get_reward(p, goal, catalog.prices[asin], dict(options), reward_mode).score
        return replace(state, page="done", score=score)
    raise ValueError(f"unknown page {path!r}")
