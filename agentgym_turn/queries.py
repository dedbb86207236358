"""Search-query variations of a question, as a model's first turn would write them (for scripted cold starts).

A cold start that always searches the question verbatim teaches one first turn; RL then samples the same query in
every rollout of a group, the turn-level rewards (search result holds the answer) never vary inside a group, and
turn-level credit has nothing to act on. These pure functions of ``(question, rng, titles)`` write the other
queries a model tries: the main entity, keywords, a paraphrase, a plausible wrong entity (a corpus title that
shares a word with the right one), or some of its keywords. ``titles`` is an optional sequence of corpus titles
(e.g. the search corpus'): with it the entity is a title the question names, without it the longest capitalised
phrase.

    >>> import numpy as np
    >>> rng, titles = np.random.default_rng(0), ("Jaws (film)", "Jaws (James Bond)", "Steven Spielberg")
    >>> q = "Who directed the film Jaws?"
    >>> main_entity(q, rng, titles), keyword_query(q, rng)
    ('Jaws', 'directed film Jaws')
    >>> paraphrase(q, rng), wrong_entity(q, rng, titles)      # a namesake: the right one or not, by the draw
    ('directed film of Jaws', 'Jaws (film)')
    >>> sorted(QUERY_STYLES)
    ['entity', 'keywords', 'paraphrase', 'partial', 'verbatim', 'wrong_entity']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import numpy as np

from agentgym_turn.error import InvalidArgument

__all__ = ["DEFAULT_STYLE_WEIGHTS", "QUERY_STYLES", "QueryFn", "keyword_query", "main_entity", "paraphrase",
           "partial_query", "sample_query", "verbatim", "wrong_entity"]  # fmt: skip

#: A query writer: ``(question, rng, titles) -> query``.
QueryFn = Callable[[str, np.random.Generator, Sequence[str] | None], str]

#: Words a keyword query leaves out: question words, auxiliaries, articles and other function words.
STOPWORDS = frozenset(
    """a an the of in on at to for by with from and or as is was are were be been being do does did has have had
    what which who whom whose when where why how that this these those it its into about than then there their his
    her he she they them name named known other another person mentioned wikipedia lead""".split()  # noqa: SIM905
)
_WORD = re.compile(r"[\w'’.-]+")
_PAREN = re.compile(r"\s*\([^()]*\)\s*$")
_CAP = r"[A-Z0-9][\w'’.-]*"
_CAPITALISED = re.compile(_CAP + r"(?:\s+(?:(?:of|de|the|and|von|van|da|du|la|le)\s+)?" + _CAP + ")*")


def _words(question: str) -> list[str]:
    return [w.strip(".'’") for w in _WORD.findall(question) if w.strip(".'’")]


def verbatim(question: str, rng: np.random.Generator, titles: Sequence[str] | None = None) -> str:
    """The question itself (what a model that has not learnt to search writes)."""
    return question.strip()


def _key(phrase: str) -> str:
    return " ".join(w.lower() for w in _words(phrase))


@lru_cache(maxsize=4)
def _title_index(titles: tuple[str, ...]) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """``(bare title's word key -> bare title, lowercased word -> titles holding it)``; a bare title has no
    ``(disambiguation)`` suffix, and its word key is its lowercased words (``2001: A Space Odyssey`` ->
    ``2001 a space odyssey``)."""
    bare: dict[str, str] = {}
    by_word: dict[str, list[str]] = {}
    for title in titles:
        name = _PAREN.sub("", title).strip()
        if not _key(name):
            continue
        bare.setdefault(_key(name), name)
        for w in {w.lower() for w in _words(name)} - STOPWORDS:
            by_word.setdefault(w, []).append(title)
    return bare, {w: tuple(ts) for w, ts in by_word.items()}


def main_entity(question: str, rng: np.random.Generator, titles: Sequence[str] | None = None) -> str:
    """The question's main entity: a corpus title it names, else its longest capitalised phrase after the first
    word, else its keywords. Among the titles named (not inside a longer one named, not a lone function word or
    the first word), a capitalised one wins over a lowercase one, then the later one (questions name their subject
    last: *the atomic number of thallium*)."""
    words = _words(question)
    if titles:
        bare, _ = _title_index(tuple(titles))
        low = [w.lower() for w in words]
        found: list[tuple[int, int]] = []
        for n in range(min(8, len(words)), 0, -1):
            for i in range(len(words) - n + 1):
                if " ".join(low[i : i + n]) not in bare or (n == 1 and (low[i] in STOPWORDS or i == 0)):
                    continue
                if not any(j <= i and i + n <= j + m for j, m in found):
                    found.append((i, n))
        if found:
            i, n = max(found, key=lambda f: (words[f[0]][:1].isupper(), f[0]))
            return " ".join(words[i : i + n])
    body = question.strip()
    first = body.split(maxsplit=1)
    spans = [m.group(0).rstrip(".") for m in _CAPITALISED.finditer(first[1] if len(first) > 1 else "")]
    spans = [s for s in spans if s.lower() not in STOPWORDS]
    if spans:
        return max(spans, key=len)
    return keyword_query(question, rng, titles)


def keyword_query(question: str, rng: np.random.Generator, titles: Sequence[str] | None = None) -> str:
    """The question's content words in order (question words, auxiliaries and function words dropped)."""
    kept = [w for w in _words(question) if w.lower() not in STOPWORDS]
    return " ".join(kept) if kept else question.strip()


def paraphrase(question: str, rng: np.random.Generator, titles: Sequence[str] | None = None) -> str:
    """A reworded query around the main entity: ``Jaws directed film`` or ``directed film of Jaws`` (drawn)."""
    entity = main_entity(question, rng, titles)
    low = {w.lower() for w in _words(entity)}
    rest = " ".join(w for w in _words(question) if w.lower() not in STOPWORDS and w.lower() not in low)
    if not rest:
        return entity or question.strip()
    return f"{entity} {rest}" if rng.random() < 0.5 else f"{rest} of {entity}"


def wrong_entity(question: str, rng: np.random.Generator, titles: Sequence[str] | None = None) -> str:
    """A plausible wrong entity, drawn with ``rng``: another corpus title sharing a word with the main entity (a
    namesake, a disambiguation sibling), else one sharing a keyword of the question; without titles, the main
    entity with one of its words dropped."""
    entity = main_entity(question, rng, titles)
    words = [w.lower() for w in _words(entity) if w.lower() not in STOPWORDS]
    if titles:
        _, by_word = _title_index(tuple(titles))
        right = entity.lower()
        for pool in (words, [w.lower() for w in _words(keyword_query(question, rng))]):
            near = sorted({t for w in pool for t in by_word.get(w, ()) if t.lower() != right})
            if near:
                return near[int(rng.integers(len(near)))]
    if len(words) > 1:
        drop = int(rng.integers(len(words)))
        return " ".join(w for i, w in enumerate(_words(entity)) if i != drop)
    return keyword_query(question, rng, titles)


def partial_query(question: str, rng: np.random.Generator, titles: Sequence[str] | None = None) -> str:
    """Some of the question's keywords, in order, drawn with ``rng`` (a query that may drop the entity, as a model's
    too-short query does: ``directed film``)."""
    kept = keyword_query(question, rng, titles).split()
    if len(kept) < 2:
        return " ".join(kept) or question.strip()
    size = int(rng.integers(1, len(kept)))
    chosen = sorted(rng.choice(len(kept), size=size, replace=False).tolist())
    return " ".join(kept[i] for i in chosen)


#: Query writers by style name.
QUERY_STYLES: dict[str, QueryFn] = {
    "verbatim": verbatim,
    "entity": main_entity,
    "keywords": keyword_query,
    "paraphrase": paraphrase,
    "partial": partial_query,
    "wrong_entity": wrong_entity,
}
#: How often :func:`sample_query` writes each style by default.
DEFAULT_STYLE_WEIGHTS: dict[str, float] = {
    "verbatim": 0.25,
    "entity": 0.15,
    "keywords": 0.15,
    "paraphrase": 0.1,
    "partial": 0.15,
    "wrong_entity": 0.2,
}


def sample_query(
    question: str,
    rng: np.random.Generator,
    titles: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
) -> tuple[str, str]:
    """``(style, query)``: a style drawn with ``weights`` (default :data:`DEFAULT_STYLE_WEIGHTS`), and its query."""
    weights = DEFAULT_STYLE_WEIGHTS if weights is None else weights
    unknown = sorted(set(weights) - set(QUERY_STYLES))
    if unknown or not weights or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise InvalidArgument(
            f"query style weights {dict(weights)!r} need known styles ({sorted(QUERY_STYLES)}; unknown: {unknown}) "
            "with weights >= 0 and a positive sum."
        )
    names = list(weights)
    p = np.array([weights[n] for n in names], dtype=float)
    style = names[int(rng.choice(len(names), p=p / p.sum()))]
    query = QUERY_STYLES[style](question, rng, titles).strip()
    return style, query or question.strip()
