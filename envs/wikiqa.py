"""Templated fact questions over the offline Wikipedia leads: the ``facts-v1`` question set of both search envs.

The older ``lead-v0`` set (``envs.wiki_two_turn.questions.question_from_document``) asks for an article's title
given its first sentence: searching the question verbatim and copying the first hit's title solves 95% of it. This
set asks about *facts inside* the leads instead, with the question rewritten by a template, so the answer is
usually a span of the text (a person, place, year, number, name) and rarely the title.

Construction (deterministic, rules only, ~5-10 s for the 10,033 leads on 2 busy cores, then cached):

1. **Subject name.** Each article is named by its title; a disambiguation suffix becomes words
   (``Casablanca (film)`` -> ``the film Casablanca``; ``Georgia (country)`` -> ``the country Georgia``).
2. **Facts.** Regular expressions read facts about the subject from its lead (first sentence, or a later sentence
   that starts with the subject, ``It``/``He``/``She``/``They`` or ``The <head noun>``), each asked through a
   template with the subject in a slot (:data:`KINDS`), e.g.:

   * ``nationality``: "Stanley Kubrick was an American film director..." -> *What nationality was Stanley
     Kubrick?* -> ``American``; ``occupation`` -> *What was the occupation of Stanley Kubrick?* -> any listed
     occupation (``film director``, ``director``, ``screenwriter``, ...);
   * ``creator``: "... a 1968 science fiction film produced and directed by Stanley Kubrick" -> *Who directed
     2001: A Space Odyssey?* -> ``Stanley Kubrick`` / ``Kubrick``; ``year``: *In which year was 2001: A Space
     Odyssey released?* -> ``1968``; ``event_year``: "... was founded in 1850" -> *In which year was X founded?*;
   * ``capital`` / ``capital_of`` / ``location`` / ``native_to`` / ``population`` / ``family`` / ``named_after``
     / ``count`` / ``alias`` / ``element`` (symbol, atomic number) / ``office`` (*Who was the 29th president of
     Chile?* -> ``Salvador Allende``, one of the few kinds whose answer is the title) / ``superlative`` (*What is
     the highest mountain in the Americas?* -> ``Aconcagua``).
3. **Two-hop questions** (bridge, HotpotQA-style): article A's lead names article B by its title, and B has a fact
   above. B's name in that fact's template is replaced by its role in A: *the person who directed A* (from a
   ``<verb> by B`` relation), *the capital of A*, *the country where A is located*, or *the <type of B> mentioned in
   the Wikipedia lead of A* when no other entity A mentions has that type. The answer must not occur in A's lead.
4. **Filters.** Answers (and aliases) that occur in the question are dropped, a question without answers is
   dropped; every answer occurs in the gold article (the last hop's) by construction and is checked; questions
   whose text equals another question's with different answers are dropped (ambiguous); subjects of fewer than 3
   characters and numeric titles are skipped.
5. **Splits** by a hash of the gold (last-hop) article as ``lead-v0``: 80% train, 10% validation, 10% test.

Each task is ``{"id", "question", "answers", "source", "hops", "kind", "doc", "docs", "oracle_queries"}`` (+
``"bridge"`` for two-hop): ``docs`` are the articles of each hop, ``oracle_queries`` the queries that retrieve them
(their titles). Built sets are cached under ``cache_dir("wikiqa")``, keyed by corpus fingerprint and
:data:`CONSTRUCTION_VERSION`.

Measured on the bundled corpus with the bundled Lucene BM25 index (validation split, ``bench/bench_questions.py``):
see :mod:`envs.wiki_two_turn.questions` and :mod:`envs.search_r1.data` for the rates of the scripted policies.
The texts come from Wikipedia (CC BY-SA 4.0; see :data:`agentgym_turn.corpus.WIKI_ATTRIBUTION`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from agentgym_turn.answers import exact_match, normalize_basic
from agentgym_turn.corpus import Document, corpus_fingerprint, load_wiki_summaries
from agentgym_turn.error import InvalidArgument
from agentgym_turn.paths import cache_dir
from agentgym_turn.retrieval import Retriever

SPLITS = ("train", "validation", "test")
CONSTRUCTION_VERSION = 1
SET_NAME = "facts-v1"

#: Nationality adjectives accepted as answers (a closed list keeps religions, eras and other adjectives out).
NATIONALITIES = frozenset(
    """American Argentine Australian Austrian Belgian Brazilian British Bulgarian Canadian Chilean Chinese Colombian
    Croatian Cuban Czech Danish Dutch Egyptian English Estonian Finnish French Georgian German Greek Hungarian
    Icelandic Indian Indonesian Iranian Irish Israeli Italian Jamaican Japanese Kenyan Korean Latvian Lebanese
    Lithuanian Mexican Mongolian Moroccan Nigerian Norwegian Pakistani Persian Peruvian Polish Portuguese Romanian
    Russian Scottish Serbian Slovak Slovenian Soviet Spanish Swedish Swiss Syrian Thai Turkish Ukrainian Uruguayan
    Venezuelan Vietnamese Welsh""".split()  # noqa: SIM905
)
#: Verb (in "... <verb> by <B>") -> the verb of the question "Who <verb> <subject>?".
RELATION_ROLES: dict[str, str] = {
    "directed": "directed",
    "written": "wrote",
    "composed": "composed",
    "founded": "founded",
    "designed": "designed",
    "painted": "painted",
    "created": "created",
    "developed": "developed",
    "invented": "invented",
    "discovered": "discovered",
    "sculpted": "sculpted",
    "authored": "wrote",
    "established": "established",
    "proposed": "proposed",
    "formulated": "formulated",
}
#: "<verb> by " for the verbs of :data:`RELATION_ROLES`.
BY_RELATION = re.compile(r"\b(" + "|".join(RELATION_ROLES) + r") by ")
#: Work noun (in "a <noun> by <B>") -> the question's verb.
WORK_ROLES: dict[str, str] = {
    "novel": "wrote", "novella": "wrote", "book": "wrote", "poem": "wrote", "play": "wrote", "essay": "wrote",
    "treatise": "wrote", "short story": "wrote", "opera": "composed", "symphony": "composed", "ballet": "composed",
    "painting": "painted", "sculpture": "sculpted", "film": "directed",
}  # fmt: skip
#: Work noun (in "is a <year> ... <noun>") -> the participle of "In which year was <subject> <participle>?".
WORK_YEAR_VERBS: dict[str, str] = {
    "film": "released", "album": "released", "song": "released", "single": "released", "video game": "released",
    "television series": "first broadcast", "sitcom": "first broadcast", "novel": "published", "book": "published",
    "poem": "published", "opera": "first performed", "play": "first performed", "musical": "first performed",
    "ballet": "first performed", "painting": "painted", "treaty": "signed", "battle": "fought",
}  # fmt: skip
#: Participles read from "<participle> in <year>" about the subject.
EVENT_VERBS = (
    "founded", "established", "released", "published", "discovered", "built", "completed", "opened", "formed",
    "launched", "introduced", "invented", "signed", "premiered", "incorporated", "adopted", "enacted", "ratified",
    "born", "constructed", "inaugurated", "first described", "first published", "first performed", "patented",
)  # fmt: skip
_NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
)  # fmt: skip
_ORG_WORDS = re.compile(
    r"\b(?:Company|Inc|Corporation|Records|Studios|Pictures|Comics|Society|Church|Party|Group|Games|Entertainment|"
    r"Institute|University|College|Press|Ltd|Limited|Council|Association|Foundation|Brothers|Bros|Films|Museum|"
    r"Agency|Government|Ministry|Academy|Club|League|Union|Army|Navy|Empire|Kingdom|Republic|Netflix|Disney)\b"
)

_ABBREV = re.compile(r"(?:\b[A-Z]|\bc|\bca|\bSt|\bMt|\bDr|\bMr|\bMrs|\bMs|\bJr|\bSr|\bNo|\bvs|\be\.g|\bi\.e|\bU\.S)\.$")
_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\[])")
_PAREN = re.compile(r"\s*\([^()]*\)")
_CAP_TOKEN = re.compile(r"[A-Z][\w'’.-]+")
_CAP_BEFORE = re.compile(r"[A-Z][\w'’.-]* $")
# A proper name: capitalised words, with lowercase particles inside ("Ludwig van Beethoven"), initials allowed.
_NAME = r"[A-Z][\w'’-]*\.?(?:\s(?:(?:de|da|van|von|der|del|di|du|la|le|bin|ibn|y)\s)?[A-Z][\w'’-]*\.?){0,4}"
_PLACE = r"(?:the )?[A-Z][\w'’-]*(?:\s(?:(?:of|de|del|da|do|of the|and the)\s)?[A-Z][\w'’-]*){0,4}"
_NUMBER = r"(\d+|" + "|".join(_NUMBER_WORDS[2:]) + r")"
_NATIONALITY = re.compile(
    r"\b(?:is|was) (?:an?|the) (?:(?:former|retired|late|renowned|influential|prominent|leading|famous)\s+)*"
    r"([A-Z][a-z]+)(?:[-–][A-Z][a-z]+)? ((?:[a-z]+[ -]){0,3}?[a-z]+?)(?=,| and | who | whose | from | of | in | known"
    r"| best | active | born | credited | considered | widely | often |\.| \()"
)
_OCCUPATIONS = re.compile(
    r"\b(is|was) (?:an?|the) (?:(?:former|retired|late|renowned|influential|prominent|leading|famous)\s+)*"
    r"([A-Z][a-z]+)(?:[-–][A-Z][a-z]+)? ((?:[a-z-]+ ?)+(?:, (?:and )?(?:an? )?(?:[a-z-]+ ?)+)*)"
)
_NOT_NOUNS = frozenset(
    ("was", "is", "were", "are", "one", "also", "who", "which", "whose", "that", "has", "had", "been", "later",
     "then", "first", "most", "more", "many", "other", "some", "the", "his", "her", "their", "its", "this")
)  # fmt: skip
_OCC_STOP = re.compile(r"\b(?:who|whose|from|of|in|known|best|active|born|credited|considered|for|with|at|on|during)\b")


# ------------------------------------------------------------------------------------------------- text helpers
def sentences(text: str) -> list[str]:
    """The sentences of ``text``, not cut after initials or common abbreviations (``c.``, ``St.``, ``U.S.``)."""
    out, start = [], 0
    for m in _SENT_END.finditer(text):
        if _ABBREV.search(text[start : m.start()]):
            continue
        out.append(text[start : m.start()].strip())
        start = m.end()
    tail = text[start:].strip()
    return [*out, tail] if tail else out


def first_sentence(text: str) -> str:
    """The first sentence of ``text``, not cut after initials or common abbreviations."""
    found = sentences(text)
    return found[0] if found else text.strip()


def split_of(docid: str) -> str:
    """The fixed split of an article: 80% train, 10% validation, 10% test by a hash of its id."""
    bucket = int(hashlib.sha256(docid.encode()).hexdigest(), 16) % 100
    return "train" if bucket < 80 else "validation" if bucket < 90 else "test"


def occurs(text: str, phrase: str) -> bool:
    """True when ``phrase`` occurs in ``text`` as whole words, case-insensitively."""
    return (
        bool(phrase.strip()) and re.search(r"(?<!\w)" + re.escape(phrase.strip()) + r"(?!\w)", text, re.I) is not None
    )


def subject_name(title: str, text: str = "") -> str:
    """How a question names an article: ``Casablanca (film)`` -> ``the film Casablanca``; a common noun as its
    lead writes it (``Giant panda`` -> ``the giant panda`` when the lead says "The giant panda")."""
    m = re.fullmatch(r"(.+?) \((.+)\)", title)
    if m is None:
        low = title[:1].lower() + title[1:]
        if low != title and re.search(r"(?:^|\s)the " + re.escape(low) + r"\b", text, re.I):
            return "the " + low if (" the " + low) in text or text.startswith("The " + low) else title
        return low if re.search(r"(?<=[a-z,;] )" + re.escape(low) + r"\b", text) else title
    base, what = m.groups()
    return f"the {what} {base}" if re.search(r"(?:^|\s)[a-z0-9]", what) else f"{base}, {what}"


def _clean_name(name: str) -> str:
    name = re.sub(r"^the ", "", name.strip().rstrip(",;:"))
    if name.endswith(".") and not re.search(r"\b[A-Z]\.$", name):
        name = name[:-1]
    return name


def _surname(name: str) -> list[str]:
    parts = name.split()
    return [parts[-1]] if len(parts) >= 2 and len(parts[-1]) > 2 and not parts[-1].endswith(".") else []


def _number_aliases(n: str) -> list[str]:
    low = n.lower()
    if low in _NUMBER_WORDS:
        return [low, str(_NUMBER_WORDS.index(low))]
    if n.isdigit() and int(n) < len(_NUMBER_WORDS):
        return [n, _NUMBER_WORDS[int(n)]]
    return [n]


def _tense(sentence: str) -> str:
    m = re.search(r"\b(is|was|are|were)\b", sentence)
    return m.group(1) if m else "is"


# ------------------------------------------------------------------------------------------------- facts
class Fact:
    """One fact about an article's subject: a question template with ``{s}`` for the subject, and its answers."""

    __slots__ = ("answers", "kind", "template")

    def __init__(self, kind: str, template: str, answers: Sequence[str]) -> None:
        self.kind, self.template = kind, template
        self.answers = list(dict.fromkeys(a.strip() for a in answers if a and a.strip()))


def person_facts(doc: Document) -> tuple[str, str] | None:
    """``(nationality, occupation)`` from a ``People`` article's first sentence, or ``None``."""
    if doc.topic != "People":
        return None
    m = _NATIONALITY.search(first_sentence(doc.text)[:300])
    if m is None or m.group(1) not in NATIONALITIES:
        return None
    return m.group(1), m.group(2).split()[-1]


def _occupations(sentence: str) -> tuple[str, list[str]] | None:
    m = _OCCUPATIONS.search(sentence[:300])
    if m is None or m.group(2) not in NATIONALITIES:
        return None
    text = _OCC_STOP.split(m.group(3))[0]
    items = [re.sub(r"^(?:and |an? )+", "", x.strip()).strip() for x in re.split(r",| and ", text)]
    items = [x for x in items if x and len(x.split()) <= 3 and not set(x.split()) & _NOT_NOUNS]
    answers = []
    for x in items:
        answers += [x, x.split()[-1]]
    return (m.group(1), answers) if answers else None


def _about_subject(sentence: str, index: int, subject_words: set[str], head: str | None) -> bool:
    if index == 0:
        return True
    first = sentence.split(" ", 2)
    if first[0] in ("It", "He", "She", "They", "Its", "His", "Her"):
        return True
    if head and len(first) > 1 and first[0] == "The" and first[1].lower() == head:
        return True
    return first[0].strip(",") in subject_words


_HEAD = re.compile(r"\b(?:is|was|are|were) (?:an?|the|one of the) (?:[\w-]+ ){0,4}?([a-z]+)(?= (?:in|of|that|"
                   r"which|who|with|by|from|on|for|located|situated)\b|[,.])")  # fmt: skip
_NAT = r"(?:(?:" + "|".join(sorted(NATIONALITIES)) + r") )?(?:[a-z]+ )?"
_CREATOR_BY = re.compile(r"\b(" + "|".join(RELATION_ROLES) + r") by (?:the )?" + _NAT + "(" + _NAME + ")")
_CREATOR_WORK = re.compile(r"\b(?:is|was) an? (?:[\w-]+ ){0,5}?(" + "|".join(WORK_ROLES) + r") (?:[\w-]+ ){0,3}?by "
                           r"(?:the )?" + _NAT + "(" + _NAME + ")")  # fmt: skip
_WORK_YEAR = re.compile(r"\b(?:is|was) an? (\d{4}) (?:[\w-]+ ){0,4}?(" + "|".join(WORK_YEAR_VERBS) + r")\b")
_EVENT = re.compile(r"\b(?:was|were|is|are) (?:[a-z]+ )?(" + "|".join(EVENT_VERBS) + r") in (\d{3,4})\b")
_CAPITAL_OF = re.compile(r"\b(?:is|was) the (?:de facto |former |historic |administrative )?capital (?:city )?of ("
                         + _PLACE + ")")  # fmt: skip
_CAPITAL = re.compile(r"\b(?:[Ii]ts|[Tt]he) capital(?: and (?:largest|most populous) city)? is (" + _PLACE + ")")
_PLACE_NOUNS = ("city|town|river|mountain|lake|island|village|port|municipality|volcano|desert|mountain range|"
                "peninsula|archipelago|sea|bay|valley|building|palace|temple|cathedral|castle|museum|mosque|church|"
                "fortress|monument|park")  # fmt: skip
_IN_PLACE = r"in (?:the )?(?:[a-z]+ )?(" + _PLACE + r"(?:, " + _PLACE + ")?)"
_LOCATION = re.compile(r"\b(?:is|was) an? (?:[a-z-]+ ){0,3}?(" + _PLACE_NOUNS + r") (?:located |situated |lying )?"
                       + _IN_PLACE)  # fmt: skip
_LOCATED = re.compile(r"\b()(?:located|situated) " + _IN_PLACE)
_NATIVE = re.compile(r"\bnative to (?:the )?(?:[a-z]+ )?(" + _PLACE + r"(?:(?:, | and )" + _PLACE + ")*)")
_POPULATION = re.compile(r"\bpopulation of (?:about |around |approximately |over |more than |nearly |roughly |some )?"
                         r"(\d[\d,.]*(?: million| billion)?)")  # fmt: skip
_FAMILY = re.compile(r"\b(?:in|of) the (?:[a-z]+ )?family ([A-Z][a-z]+(?:idae|aceae|inae))\b")
_NAMED = re.compile(r"\bnamed (?:after|for) (?:the )?(" + _NAME + ")")
_COUNT = re.compile(r"\b(?:has|have|had|contains|comprises|consists of|includes) " + _NUMBER + r" ([a-z]+s)\b")
_ALIAS = re.compile(r"\b(?:also|commonly|often|sometimes|formerly|originally|officially) (?:known as|called|"
                    r"referred to as|spelled) (?:the )?([\w'’ -]+?)(?=[,;.)]| or | and |$)")  # fmt: skip
_ELEMENT = re.compile(r"\bsymbol ([A-Z][a-z]{0,2}) and atomic number (\d+)")
_OFFICE = re.compile(r"\bserved as (?:the )?(\d+(?:st|nd|rd|th)|first|second|third|fourth|fifth|last) ([a-z ]{3,30}?) "
                     r"of (" + _PLACE + r") from (\d{4})")  # fmt: skip
_SUPERLATIVE = re.compile(r"(?:The )?[^,]{1,60}? (is|was) the (largest|smallest|longest|highest|oldest|most populous|"
                          r"deepest|tallest|biggest|second-largest|second-highest|second-longest|busiest) "
                          r"([a-z]+(?: [a-z]+)?) (in|of|on) (" + _PLACE + r")[,.]")  # fmt: skip


def _head_noun(first: str) -> str | None:
    m = _HEAD.search(first)
    noun = m.group(1) if m else None
    return None if noun is None or noun.endswith("ly") or noun in _NOT_NOUNS else noun


def document_facts(doc: Document) -> list[Fact]:
    """Every templated fact the rules read from one article's lead (see the module docstring)."""
    all_sents = sentences(doc.text)
    if not all_sents:
        return []
    first = all_sents[0]
    head = _head_noun(first)
    words = set(_PAREN.sub("", doc.title).split())
    about = [s for i, s in enumerate(all_sents) if _about_subject(s, i, words, head)]
    be = _tense(first)
    facts: list[Fact] = []
    add = facts.append

    def unique(pattern: re.Pattern[str], group: int = 1) -> re.Match[str] | None:
        """The first match in a sentence about the subject, when every match in the lead agrees on ``group``."""
        every = {m.group(group) for m in pattern.finditer(doc.text)}
        if len(every) != 1:
            return None
        return next((m for s in about for m in pattern.finditer(s)), None)

    if doc.topic == "People":
        pf = person_facts(doc)
        if pf is not None:
            add(Fact("nationality", f"What nationality {be} {{s}}?", [pf[0]]))
        occ = _occupations(first)
        if occ is not None:
            add(Fact("occupation", f"What {occ[0]} the occupation of {{s}}?", occ[1]))
    m = _CREATOR_BY.search(first)
    role = RELATION_ROLES[m.group(1)] if m else None
    if m is None:
        m = _CREATOR_WORK.search(first)
        role = WORK_ROLES[m.group(1)] if m else None
    if m is not None and role is not None:
        name = _clean_name(m.group(2))
        if len(name.split()) >= 2 and not _ORG_WORDS.search(name):
            add(Fact("creator", f"Who {role} {{s}}?", [name, *_surname(name)]))
    m = _WORK_YEAR.search(first)
    if m is not None:
        add(Fact("year", f"In which year was {{s}} {WORK_YEAR_VERBS[m.group(2)]}?", [m.group(1)]))
    years: dict[str, set[str]] = defaultdict(set)
    for m in _EVENT.finditer(doc.text):
        years[m.group(1)].add(m.group(2))
    for s in about:
        for m in _EVENT.finditer(s):
            verb = m.group(1)
            if (
                verb in years
                and len(years.pop(verb)) == 1
                and (verb == "born") == (doc.topic == "People")
                and not re.search(r"\b(?:who|which|whose|that|his|her|their)\b", s[: m.start()])
            ):
                add(Fact("event_year", f"In which year was {{s}} {verb}?", [m.group(2)]))
    m = unique(_CAPITAL_OF)
    if m is not None:
        add(Fact("capital_of", "Of which country or region is {s} the capital?", _place_answers(m.group(1))))
    m = unique(_CAPITAL)
    if m is not None:
        add(Fact("capital", "What is the capital of {s}?", _place_answers(m.group(1))))
    m = _LOCATION.search(first) or unique(_LOCATED, 2)
    if m is not None:
        add(Fact("location", "Where is {s} located?", _place_answers(m.group(2), sep=", ")))
    m = unique(_NATIVE)
    if m is not None:
        add(Fact("native_to", "To which region is {s} native?", _place_answers(m.group(1), sep=", | and ")))
    m = unique(_POPULATION)
    if m is not None and (len(m.group(1)) >= 4 or "illion" in m.group(1)):
        add(Fact("population", "What is the population of {s}?", [m.group(1).rstrip(".,")]))
    m = unique(_FAMILY)
    if m is not None:
        add(Fact("family", "To which family does {s} belong?", [m.group(1)]))
    m = unique(_NAMED)
    if m is not None:
        name = _clean_name(m.group(1))
        add(Fact("named_after", "Who or what is {s} named after?", [name, *_surname(name)]))
    for s in about:
        for m in _COUNT.finditer(s):
            n, noun = m.group(1), m.group(2)
            if len(set(re.findall(r"\b" + _NUMBER + " " + noun + r"\b", doc.text))) == 1:
                add(Fact("count", f"How many {noun} does {{s}} have?", _number_aliases(n)))
    aliases = [a for a in _ALIAS.findall(first) if 0 < len(a.split()) <= 5]
    if aliases:
        add(Fact("alias", "By what other name is {s} known?", aliases))
    m = _ELEMENT.search(first)
    if m is not None:
        add(Fact("element", "What is the atomic number of {s}?", [m.group(2)]))
        add(Fact("element", "What is the chemical symbol of {s}?", [m.group(1)]))
    m = _OFFICE.search(doc.text)
    if m is not None:
        office = f"{m.group(1)} {m.group(2)} of {_clean_name(m.group(3))}"
        add(Fact("office", f"In which year did {{s}} become the {office}?", [m.group(4)]))
        add(Fact("office", f"Who was the {office}?", [doc.title, *_surname(_PAREN.sub("", doc.title))]))
    m = _SUPERLATIVE.match(first)
    if m is not None:
        be2, sup, noun, prep, place = m.groups()
        add(Fact("superlative", f"What {be2} the {sup} {noun} {prep} {place}?", [_PAREN.sub("", doc.title)]))
    return facts


def _place_answers(place: str, sep: str = ",") -> list[str]:
    """A place span and its parts (``"Guangdong, China"`` -> also ``Guangdong``, ``China``), without the
    nationality adjectives the place pattern can catch (``the Chinese province of ...``)."""
    place = _clean_name(place)
    parts = [place, *(p.strip() for p in re.split(sep, place))] if sep else [place]
    return [p for p in parts if p and not set(p.split()) <= NATIONALITIES]


# ------------------------------------------------------------------------------------------------- questions
def _task(qid: str, question: str, answers: Sequence[str], kind: str, docs: Sequence[Document], **extra: Any
          ) -> dict[str, Any]:  # fmt: skip
    return {"id": qid, "question": question, "answers": list(answers), "source": "wiki-offline", "hops": len(docs),
            "kind": kind, "doc": docs[-1].docid, "docs": [d.docid for d in docs],
            "oracle_queries": [_PAREN.sub("", d.title) for d in docs], **extra}  # fmt: skip


def _finish(task: dict[str, Any], gold_text: str, context: str = "") -> dict[str, Any] | None:
    """Drop answers that occur in the question (or in ``context``, the first hop's lead); None if none is left
    or the gold article does not contain one."""
    golds = [a for a in task["answers"] if not occurs(task["question"], a) and not (context and occurs(context, a))]
    if not golds or not any(occurs(gold_text, a) for a in golds):
        return None
    return dict(task, answers=golds)


def single_hop_questions(
    docs: Sequence[Document], facts: Mapping[str, Sequence[Fact]] | None = None
) -> list[dict[str, Any]]:
    """One question per templated fact of every article (``facts``: :func:`document_facts` by docid, when known)."""
    out = []
    for d in docs:
        if len(d.title) < 3 or not re.search(r"[A-Za-z]{2}", d.title):
            continue
        name = subject_name(d.title, d.text)
        for i, f in enumerate(document_facts(d) if facts is None else facts[d.docid]):
            question = f.template.replace("{s}", name)
            task = _finish(_task(f"facts1:{d.docid}:{i}", question, f.answers, f.kind, [d]), d.text)
            if task is not None:
                out.append(task)
    return out


def mentions(doc: Document, by_first_word: Mapping[str, Sequence[str]], *, before_full_stop: bool = True) -> list[str]:
    """Titles (indexed by their first word) that ``doc``'s lead names verbatim, in order, longest match first.

    A whole name only: not inside a longer capitalised name ("Robert Burns" in "Robert Burns Woodward").
    ``before_full_stop=False`` misses one-word names right before a full stop ("... city is Accra."), as the frozen
    ``lead-v0`` construction did.
    """
    text = doc.text
    found: list[tuple[int, int, str]] = []
    tokens = set(_CAP_TOKEN.findall(text))
    for token in tokens | {t.rstrip(".") for t in tokens} if before_full_stop else tokens:
        for title in by_first_word.get(token, ()):
            if title == doc.title:
                continue
            start = text.find(title)
            while start >= 0:
                end = start + len(title)
                before, after = text[start - 1 : start] if start else "", text[end : end + 2]
                if (
                    not (before.isalnum() or before in (".", "_"))
                    and not (after[:1].isalnum() or after[:1] == "_")
                    and not (after[:1] == " " and after[1:2].isupper())
                    and not _CAP_BEFORE.search(text, max(0, start - 40), start)
                ):
                    found.append((start, end, title))
                start = text.find(title, start + 1)
    found.sort(key=lambda x: (x[0], -(x[1] - x[0])))
    out, last = [], -1
    for s, e, t in found:
        if s >= last:
            out.append(t)
            last = e
    return list(dict.fromkeys(out))


def _entity_type(doc: Document) -> str | None:
    pf = person_facts(doc)
    return pf[1] if pf is not None else _head_noun(first_sentence(doc.text))


def relation_to(text: str, name: str) -> str | None:
    """The role verb when ``text`` says "<verb> by <name>" up to ``name``'s first mention ("directed"), else None."""
    rel = None
    for m in BY_RELATION.finditer(text[: text.find(name) + 1]):
        if text[m.end() : m.end() + len(name)] == name:
            rel = RELATION_ROLES[m.group(1)]
    return rel


def bridge_roles(
    a: Document, a_name: str, mentioned: Sequence[str], types: Mapping[str, str | None], *, where: str = "lead of"
) -> Iterator[tuple[str, str]]:
    """``(title of B, how a question names B through A)`` for the entities A's lead mentions, A being called
    ``a_name`` (its own name, or its role through an earlier article): a person by the relation the lead states,
    a capital, the one country A lies in, else the only entity of its type A mentions ("the city mentioned in the
    Wikipedia <where> A": ``"lead of"`` in facts-v1's two-hop questions, ``"article on"`` in SearchR1's multi-hop)."""
    counts = Counter(types.get(t) for t in mentioned)
    for b in mentioned:
        rel = relation_to(a.text, b)
        if rel is not None:
            yield b, f"the person who {rel} {a_name}"
        elif re.search(r"\b(?:[Ii]ts|the) capital(?: and (?:largest|most populous) city)? is " + re.escape(b), a.text):
            yield b, f"the capital of {a_name}"
        elif types.get(b) == "country" and re.search(r"\b(?:located |situated )?in (?:the )?" + re.escape(b), a.text):
            if counts["country"] == 1:
                yield b, f"the country where {a_name} is located"
        elif types.get(b) and counts[types.get(b)] == 1:
            yield b, f"the {types[b]} mentioned in the Wikipedia {where} {a_name}"


#: Fact kinds that read well about a bridge entity (the others name it in a way that gives the question away).
BRIDGE_KINDS = frozenset(
    {"nationality", "capital", "capital_of", "location", "population", "year", "event_year", "family", "named_after",
     "native_to", "creator", "element", "count"}
)  # fmt: skip


def two_hop_questions(
    docs: Sequence[Document], facts: Mapping[str, Sequence[Fact]] | None = None, *, per_source: int = 2
) -> list[dict[str, Any]]:
    """Bridge questions A -> B (see the module docstring), at most ``per_source`` per first-hop article A."""
    by_title = {d.title: d for d in docs}
    facts = {d.docid: document_facts(d) for d in docs} if facts is None else facts
    bridge_facts = {d.title: [f for f in facts[d.docid] if f.kind in BRIDGE_KINDS] for d in docs if len(d.title) >= 4}
    types = {t: _entity_type(by_title[t]) for t in bridge_facts}
    first_word: dict[str, list[str]] = defaultdict(list)
    for t in bridge_facts:
        first_word[t.split()[0]].append(t)
    out = []
    for a in docs:
        made = 0
        for b, role in bridge_roles(a, subject_name(a.title, a.text), mentions(a, first_word), types):
            bdoc = by_title[b]
            for i, f in enumerate(bridge_facts[b]):
                if f.kind == "location" and role.startswith("the country where"):
                    continue
                question = f.template.replace("{s}", role)
                question = question[0].upper() + question[1:]
                task = _task(f"facts2:{a.docid}->{bdoc.docid}:{i}", question, f.answers, f.kind, [a, bdoc], bridge=b)
                task = _finish(task, bdoc.text, context=a.text + " " + a.title)
                if task is not None:
                    out.append(task)
                    made += 1
                    break  # one fact per bridge
            if made >= per_source:
                break
    return out


def _drop_ambiguous(tasks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    by_text: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for t in tasks:
        by_text[t["question"].lower()].add(tuple(sorted(a.lower() for a in t["answers"])))
    return [t for t in tasks if len(by_text[t["question"].lower()]) == 1]


def build_questions(docs: Sequence[Document]) -> list[dict[str, Any]]:
    """The whole ``facts-v1`` set of ``docs`` (single-hop then two-hop, corpus order), without splits."""
    facts = {d.docid: document_facts(d) for d in docs}
    return _drop_ambiguous(single_hop_questions(docs, facts) + two_hop_questions(docs, facts))


def _cached(docs: tuple[Document, ...], build: Callable[[Sequence[Document]], list[dict[str, Any]]]
            ) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    key = hashlib.sha256(f"{SET_NAME}|{CONSTRUCTION_VERSION}|{corpus_fingerprint(docs)}".encode()).hexdigest()[:16]
    path = cache_dir("wikiqa") / f"{SET_NAME}-{key}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    by_split: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    for q in build(docs):
        by_split[split_of(q["doc"])].append(q)
    tmp = path.with_suffix(f".{id(by_split)}.tmp")
    tmp.write_text(json.dumps(by_split), encoding="utf-8")
    tmp.replace(path)
    return by_split


@lru_cache(maxsize=2)
def _corpus_sets() -> dict[str, list[dict[str, Any]]]:
    return _cached(load_wiki_summaries(), build_questions)


def fact_questions(split: str = "train", *, hops: int | None = None, docs: Sequence[Document] | None = None
                   ) -> list[dict[str, Any]]:  # fmt: skip
    """The ``facts-v1`` questions of ``split`` (all, or only those with ``hops`` hops), cached on disk.

    ``docs`` defaults to the bundled corpus; the tasks are fresh copies (safe to mutate).
    """
    if split not in SPLITS:
        raise InvalidArgument(f"split={split!r} is not one of {SPLITS}.")
    if hops not in (None, 1, 2):
        raise InvalidArgument(f"hops={hops!r} must be None, 1 or 2.")
    sets = _corpus_sets() if docs is None else _cached(tuple(docs), build_questions)
    return [json.loads(json.dumps(q)) for q in sets[split] if hops is None or q["hops"] == hops]


# ------------------------------------------------------------------------------------------------- difficulty
def scripted_rates(
    tasks: Sequence[dict[str, Any]],
    retriever: Retriever,
    *,
    k: int,
    normalize: Callable[[str], str] = normalize_basic,
    prior: Sequence[dict[str, Any]] = (),
) -> dict[str, float]:
    """The success rates of three scripted policies on ``tasks`` (the difficulty regime of a question set).

    * ``title_em``: search the question verbatim (top-``k``) and answer the first hit's title (exact match);
    * ``search_answer``: the same search; success when a retrieved passage (title or text) contains a gold answer
      as whole words, case-insensitively (an oracle that reads the right span off the passages);
    * ``no_search_em``: no search, answer the most frequent first answer of ``prior`` (e.g. the train split);
      ``no_search_kind_em``: the most frequent first answer of ``prior`` among questions of the same ``kind``.
    """
    hits = retriever.batch_search([t["question"] for t in tasks], k=k)
    top = Counter(t["answers"][0] for t in prior).most_common(1)
    guess = top[0][0] if top else ""
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for t in prior:
        by_kind[t.get("kind", "")][t["answers"][0]] += 1
    n = max(len(tasks), 1)
    title = search = blind = blind_kind = 0
    for t, passages in zip(tasks, hits, strict=True):
        golds = t["answers"]
        title += bool(passages) and exact_match(passages[0].title, golds, normalize=normalize)
        search += any(occurs(f"{p.title} {p.text}", g) for p in passages for g in golds)
        blind += exact_match(guess, golds, normalize=normalize)
        kind_top = by_kind[t.get("kind", "")].most_common(1)
        blind_kind += bool(kind_top) and exact_match(kind_top[0][0], golds, normalize=normalize)
    return {"n": float(len(tasks)), "title_em": title / n, "search_answer": search / n, "no_search_em": blind / n,
            "no_search_kind_em": blind_kind / n}  # fmt: skip
