"""Demonstrations made from the document itself, for quote-first answers (spec/quote.py), measured and
not kept (bench/results/quality.md: on Gemma 3 270M they changed nothing on needles and counterfactual
answers, and the base model copied the demonstrations' quotes): two or
three examples of a question, the sentence of the document that answers it (verbatim) and the
answer, and one question the document does not answer (``Quote: none``), placed after the document in
its saved prefix, so no question pays for them.

The idea is DoubleDipper's (Kim et al., 2024, "DoubleDipper: Improving Long-Context LLMs via Context
Recycling", arXiv 2406.13632): few-shot examples made from the same long input, each pointing at its
passage, add about 16 points on long-context QA.

* The sentences are chosen by rule (:func:`pick_sentences`): evenly spread through the document,
  8-35 words, holding a number or a name (a capitalised word inside the sentence), no line break;
  a text without sentence punctuation (a transcript) gives clauses of 12-30 words instead.
* The question and the short answer of each are written by the model (``write``: a prompt -> the
  model's greedy continuation, cut at its first line), once, at ingestion.
* The question without an answer is a demonstration question with its name or number replaced by an
  invented one, so it is one the document nearly answers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_SENTENCE = re.compile(r"(?<![^\s])[A-Z][^.!?\n]{20,400}[.!?](?=\s|$)")
_ABBREVIATION = re.compile(r"\b(Mr|Mrs|Ms|Dr|St|Mt|No|vs|etc|i\.e|e\.g)\.$")
_CLAUSE = re.compile(r"(?<![\w'\u2019])\w[^,.!?\n]{40,240}")
_SALIENT = re.compile(r"\d|(?<=\w )[A-Z][a-z]")
_INVENTED = ["Kalomir", "Vendral", "Torsel", "Brixna", "Falquen", "Zenhol", "Marvik", "Dellora"]

#: The prompts the model completes (one line each); ``{s}`` is the document's sentence.
QUESTION_PROMPT = (
    "A sentence from a document:\n{s}\n\n"
    "Write one short question that this sentence answers, using its own words.\nQuestion:"
)
ANSWER_PROMPT = "A sentence from a document:\n{s}\n\nQuestion: {q}\nThe answer in a few words, taken from the sentence:"
HEADING = "Examples of questions about this document, each answered with the sentence of the document that answers it:"


@dataclass(frozen=True, slots=True)
class Demo:
    question: str
    quote: str  # a sentence of the document, verbatim; "none" for a question it does not answer
    answer: str


def pick_sentences(text: str, n: int = 2, exclude: Sequence[str] = ()) -> list[str]:
    """Up to ``n`` sentences of ``text`` for demonstrations, in document order, from evenly spaced
    parts of it (see the module docstring for the rule); none that holds a string of ``exclude``."""

    def usable(s: str) -> bool:
        return not _ABBREVIATION.search(s) and not any(x in s for x in exclude)

    found = [
        m
        for m in _SENTENCE.finditer(text)
        if 8 <= len(m.group().split()) <= 35 and _SALIENT.search(m.group()) and usable(m.group())
    ]
    if len(found) < n:  # no sentence punctuation to speak of: clauses
        found = [m for m in _CLAUSE.finditer(text) if 12 <= len(m.group().split()) <= 30 and usable(m.group())]
    picked: list[str] = []
    for k in range(n):
        at = len(text) * (k + 1) // (n + 1)
        later = [m for m in found if m.start() >= at and m.group().strip() not in picked]
        if later:
            picked.append(later[0].group().strip())
    return picked


def _line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip().strip('"')


def make_demos(
    text: str, write: Callable[[str], str], n: int = 2, seed: int = 0, exclude: Sequence[str] = ()
) -> list[Demo]:
    """``n`` demonstrations from ``text`` (question, quote, answer), then one question it does not
    answer; ``write(prompt)`` is the model's continuation of a prompt. Fewer when the document has
    too few sentences, or the model writes an empty line. ``exclude``: see :func:`pick_sentences`."""
    demos: list[Demo] = []
    for sentence in pick_sentences(text, n, exclude):
        question = _line(write(QUESTION_PROMPT.format(s=sentence)))
        if not question.endswith("?") or len(question) < 8:
            continue
        answer = _line(write(ANSWER_PROMPT.format(s=sentence, q=question)))
        if answer:
            demos.append(Demo(question, sentence, answer))
    if demos:
        demos.append(Demo(_absent(demos[0].question, text, random.Random(seed)), "none", ""))
    return demos


def _absent(question: str, text: str, rng: random.Random) -> str:
    """``question`` about something the document does not name: its first name or number (past the
    first word) replaced by an invented one that the text does not hold."""
    invented = next((w for w in rng.sample(_INVENTED, len(_INVENTED)) if w not in text), "Kalomir")
    m = re.search(r"(?<=\w )[A-Z][a-z]+|\d+", question)
    if m is None:
        return f"What does the document say about {invented}?"
    other = invented if m.group()[0].isalpha() else str(int(m.group()) + 7)
    return question[: m.start()] + other + question[m.end() :]


def render(demos: list[Demo], refusal: str) -> str:
    """The demonstrations as prompt text: a heading, then ``Question: / Quote: / Answer:`` blocks (the
    question the document does not answer gets ``Quote: none`` and ``refusal``)."""
    if not demos:
        return ""
    blocks = [
        f"Question: {d.question}\nQuote: {d.quote}\nAnswer: {d.answer if d.quote != 'none' else refusal}" for d in demos
    ]
    return f"{HEADING}\n\n" + "\n\n".join(blocks) + "\n"
