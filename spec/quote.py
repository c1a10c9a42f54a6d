"""Quote-first answers: the model first copies the passage of the document that answers the question,
then answers, and docqa checks the copy against the document.

The answer is written in two parts after the question: ``Quote: <a span of the document>`` up to a
line break, then ``Answer: <the answer>``. The quote ends at the first token that holds a line
break; ``Answer:`` (or, with ``restate``, the question again and ``Answer:``) is then decoded as
scaffolding the model did not choose, and the model answers after it.

* **Constrained** (``constrained=True``): while the quote is written, each token is chosen among the
  tokens that continue a span of the document's tokens that the quote matches so far (the positions
  :class:`QuoteIndex` finds), a line break (the quote ends) and, at the first token only, the words
  that say no passage answers (``none``). So a quote is a span of the document's tokens by
  construction, and it ends where the model ends it.
* **Unconstrained**: the model writes the quote freely; the same matching follows it, and a quote
  whose tokens stop matching the document is not verified (the answer is then the refusal).

A quote of ``none``, or an unverified one, ends the answer with the refusal text, without decoding
an answer. Every token is still the model's own choice (among the allowed ones while it quotes), and
speculative decoding stays exact with respect to that choice: verification applies the same
constraint to each verify row, in order (:meth:`Quoting.choose`), so a speculative run emits what a
plain run emits.

Cost: the first quote token considers every distinct document token (one ``argmax`` over at most a
few thousand ids); each later one only the continuations of the spans still matched, which narrow to
a handful after a few tokens. Building the index is one ``argsort`` of the document's tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec.sampling import Sampler

#: Words a quote may consist of to say that no passage answers the question (case-folded, stripped).
NONE_WORDS = ("none",)


_CLOSERS = b"\"')]\xe2\x80\x9d\xe2\x80\x99"  # closing quotes and brackets (UTF-8 bytes of the typographic ones)


def _ends_sentence(piece: bytes) -> bool:
    """A token that ends a sentence: it holds a line break, or ends with . ! or ? (before closers)."""
    return b"\n" in piece or piece.rstrip().rstrip(_CLOSERS).endswith((b".", b"!", b"?"))


def fold(word: str) -> str:
    """A word as the checks compare it: case-folded, without surrounding apostrophes and without a
    possessive ending ("Austria's" -> "austria")."""
    folded = word.casefold().strip("'\u2019")
    return folded[:-2] if folded.endswith(("'s", "\u2019s")) and len(folded) > 2 else folded


def question_keys(question: str) -> set[str]:
    """The words of a question that name what it asks about, and that a passage answering it must hold
    too (case-folded): numbers, and capitalised words other than the question's first word (names,
    places, titles). "Who was the cook of Noxfal Hall?" -> {"noxfal", "hall"}. Of a multiple-choice
    question only the stem counts: the passage supports one option, not all of them (lines from the
    first "(A) ...", "A) ..." or "A. ..." on are options)."""
    question = _OPTION_LINE.split(question, maxsplit=1)[0]
    words = re.findall(r"[\w'\u2019-]+", question)
    keys = set()
    for i, w in enumerate(words):
        if any(c.isdigit() for c in w) or (i > 0 and w[:1].isupper() and w.casefold() not in _NOT_NAMES):
            keys.add(fold(w))
    return keys


#: The first option line of a multiple-choice question: "(A) ...", "A) ...", "A. ..." at a line's start.
_OPTION_LINE = re.compile(r"\n[ \t]*(?:\([A-Ea-e]\)|[A-Ea-e][.)])[ \t]")

#: Capitalised words in questions that name nothing (options of a choice, pronouns, the document).
_NOT_NAMES = frozenset("i a b c d the document text answer option according".split())


#: Words that open a noun phrase (:func:`topics`): articles, demonstratives, possessives, and the
#: quantifiers of a question about a quantity ("how many clerks": a passage that gives the number names
#: what it counts).
_DETERMINERS = frozenset("the a an this that these those his her its their our my your many much".split())
#: Words that end a noun phrase (:func:`topics`): prepositions, auxiliaries, pronouns, conjunctions.
_PHRASE_ENDS = frozenset(
    "of in on at to for from by with and or but as is are was were be been do does did has have had can could "
    "will would shall should may might must not no than then who whom whose what which where when why how it he "
    "she they we you i into over under after before about between through during up down out off so if".split()
)
#: Auxiliaries after which a question's subject is followed by its verb, bare ("does the Sun rise").
_AUXILIARIES = frozenset("do does did can could will would shall should may might must".split())
#: Nouns that name the document itself or its parts: a phrase ending in one describes the document ("the
#: two-column document", "the first lecture"), not what a passage must mention.
_DOCUMENT_WORDS = frozenset(
    "document text passage page pages table tables section chapter paragraph line lines sentence book article "
    "story report file list lecture talk conversation author writer narrator speaker professor".split()
)
#: Words of a noun phrase that name the kind of answer or a quantity (a passage gives the date, not the word
#: "date"), ordinals, and vague nouns: never required of a passage.
_NOT_TOPICS = _DOCUMENT_WORDS | frozenset(
    "name names date dates time times year years day days month months number numbers amount size length age "
    "colour color "
    "kind type sort way part thing things one ones first second third fourth fifth last next other same main "
    "most many much more some any all each following above below".split()
)


def topics(question: str) -> set[str]:
    """What a question is about beyond its names and numbers: the words of its noun phrases, each a run of
    words after a determiner up to a function word (:data:`_PHRASE_ENDS`), case-folded. Left out: words of
    :data:`_NOT_TOPICS`, numbers, a phrase that ends in a word for the document (:data:`_DOCUMENT_WORDS`),
    a word ending in -ed, -en or -ing after the first of its phrase (a participle that starts a clause:
    "the crate shipped from Kabri"), and after an auxiliary (:data:`_AUXILIARIES`) the last word of the
    first phrase of two words or more that "of" does not continue: the verb ("In which ocean did the
    Titanic sink?" -> {"titanic"}). Empty for a multiple-choice question (its stem speaks of the document
    in its own words; the options carry what a passage holds). "What was the name of the dog of the keeper
    of the Falsel lighthouse?" -> {"dog", "keeper", "falsel", "lighthouse"}.

    This is the lexical-overlap test of answerability: a passage that never mentions what the question
    asks about ("the dog", "the cook") does not answer it, whatever it says about the same entity. The
    phrase words are English; a question in another language has no topics, and so is never refused
    by this check."""
    if _OPTION_LINE.search(question):
        return set()
    found: set[str] = set()
    run: list[str] | None = None
    verb_due = False  # after "did", "can"...: the subject's phrase ends in the bare verb ("did the Titanic sink")

    def close(after: str) -> None:
        nonlocal verb_due
        if verb_due and run and len(run) > 1 and after != "of":  # "of" goes on with the subject's phrase
            run.pop()
            verb_due = False
        if run and run[-1] not in _DOCUMENT_WORDS:
            found.update(w for w in run if w not in _NOT_TOPICS)

    for piece in re.findall(r"[\w'\u2019-]+|[^\w\s]", question):
        w = fold(piece)
        if not re.fullmatch(r"[\w'\u2019-]+", w) or w in _PHRASE_ENDS or w in _DETERMINERS:
            close(w)
            verb_due = verb_due or w in _AUXILIARIES
            run = [] if w in _DETERMINERS else None
        elif run is not None and not any(c.isdigit() for c in w):
            if run and len(w) > 4 and w.endswith(("ed", "en", "ing")):
                close(w)
                run = None
            else:
                run.append(w)
    close("")
    return found


_ENDINGS = (("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("ing", ""), ("ing", "e"))


def _stems(word: str) -> set[str]:
    """``word`` and what it may be without a plural or verb ending ("rises" -> {"rises", "rise", "ris"},
    "counted" -> {"counted", "count", "counte"}, "cities" -> {"cities", "city", "citie", "citi"}): two
    words with a stem in common are one word with other endings."""
    out = {word}
    for end, put in _ENDINGS:
        if word.endswith(end) and len(word) - len(end) >= 3:
            out.add(word[: -len(end)] + put)
    return out


def uncovered(wanted: set[str], text: str) -> set[str]:
    """The words of ``wanted`` (case-folded) that ``text`` lacks: not there, nor with another ending
    (:func:`_stems`: "cooks", "counted", "rises"), nor as the start of a longer word of five letters or
    more ("child" in "children"), nor, for a hyphenated word, any of its parts."""
    have = words(text)
    stems = set().union(*(_stems(w) for w in have)) if have else set()

    def covered(w: str) -> bool:
        if _stems(w) & stems:
            return True
        if len(w) >= 5 and any(h.startswith(w) for h in have):
            return True
        return "-" in w and any(p and covered(p) for p in w.split("-"))

    return {w for w in wanted if not covered(w)}


def _mass(row: np.ndarray, ids: np.ndarray) -> float:
    """The softmax probability of ``ids`` together under logits ``row`` (float32 [n_vocab])."""
    if not len(ids):
        return 0.0
    top = float(row.max())
    return float(np.exp(row[ids].astype(np.float64) - top).sum() / np.exp(row.astype(np.float64) - top).sum())


_SMALL_NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(_SMALL_NUMBERS)}
#: Capitalised words that name nothing: sentence starts, pronouns, question and answer words.
_COMMON = frozenset(
    "the a an in on at of to for from by with and but or so if as it its he she they we you i his her their our "
    "this that these those there here yes no not none when what who whom whose where why how which because "
    "then than also after before during while is are was were be been has have had do does did can could will "
    "would should may might must answer quote document text option according".split()
)


def words(text: str) -> set[str]:
    """The case-folded words of ``text``, with small numbers both as words and digits ("three", "3"),
    and a hyphenated word also as its parts ("Zariski-Topologie": "zariski", "topologie")."""
    found = {fold(w) for w in re.findall(r"[\w'\u2019-]+", text)}
    found |= {part for w in found if "-" in w for part in w.split("-") if part}
    found |= {_NUMBER_WORDS[w] for w in found if w in _NUMBER_WORDS}
    found |= {w for w, d in _NUMBER_WORDS.items() if d in found}
    return found


def specifics(text: str) -> set[str]:
    """What a text names (case-folded): its numbers, and its capitalised words other than the common
    ones (:data:`_COMMON`) and a lone option letter (A-D). "Drami Drabriru was born in 1804." ->
    {"drami", "drabriru", "1804"}."""
    out = set()
    for w in re.findall(r"[\w'\u2019-]+", text):
        folded = fold(w)
        if any(c.isdigit() for c in w):
            out.add(folded)
        elif w[:1].isupper() and folded not in _COMMON and not (len(w) == 1 and w in "ABCD"):
            out.add(folded)
    return out


def word_key(piece: bytes) -> bytes:
    """What a quote's first token must share with a document token to start at it: the token's text
    without surrounding whitespace, case-folded (a quote may start "There" where the document says
    " there")."""
    return piece.strip().decode("utf-8", errors="replace").casefold().encode()


class QuoteIndex:
    """Where each token occurs in a document's tokens (int32 [n_doc], the document part of its prompt
    prefix, without the scaffolding around it); ``piece``: token id -> bytes."""

    def __init__(self, tokens: np.ndarray, piece: Callable[[int], bytes]) -> None:
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int32)  # [n_doc]
        self.order = np.argsort(self.tokens, kind="stable").astype(np.int64)  # positions, sorted by token
        self.vocab, first = np.unique(self.tokens[self.order], return_index=True)  # distinct tokens, sorted
        self.first = np.append(first, len(self.tokens)).astype(np.int64)  # [len(vocab) + 1]
        self.piece = piece
        self._passages: tuple[np.ndarray, dict[str, np.ndarray]] | None = None  # _passage_index
        self.keys: dict[bytes, list[int]] = {}  # word_key -> the document's tokens spelling it
        for t in self.vocab.tolist():
            if key := word_key(piece(t)):
                self.keys.setdefault(key, []).append(t)

    def _passage_index(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The passage number of each document token (int32 [n_doc]) and, for each word (as
        :func:`words` folds it), the passages holding it (ascending int64). A passage is a line of the
        document's text (a paragraph, a heading): it ends after a token holding a line break; a blank
        line is no passage of its own, and the rows of a table are one. Built once, at the first keyed
        quote: O(n_doc)."""
        if self._passages is None:
            n = len(self.tokens)
            pieces = {int(t): self.piece(int(t)) for t in self.vocab.tolist()}
            breaks = np.array([b"\n" in pieces[int(t)] for t in self.vocab.tolist()], bool)
            end_at = breaks[np.searchsorted(self.vocab, self.tokens)] if n else np.empty(0, bool)
            cuts = [0, *(np.flatnonzero(end_at) + 1).tolist()]
            if cuts[-1] != n:
                cuts.append(n)
            number = np.empty(n, np.int32)
            found: dict[str, list[int]] = {}
            passage, in_table = -1, False
            for a, b in zip(cuts, cuts[1:], strict=False):
                raw = b"".join(pieces[t] for t in self.tokens[a:b].tolist()).decode("utf-8", errors="replace")
                line, row = words(raw), raw.lstrip().startswith("|")
                # A blank line belongs to the passage before it; a table (rows "| a | b |") is one passage,
                # so a cell is found with its column's header and its row's label.
                if (line or passage < 0) and not (row and in_table):
                    passage += 1
                in_table = row if line else in_table
                number[a:b] = passage
                for w in line:
                    found.setdefault(w, []).append(passage)
            self._passages = number, {w: np.unique(np.array(v, np.int64)) for w, v in found.items()}
        return self._passages

    def around(self, a: int, b: int, reach: int = 1) -> tuple[int, int]:
        """Token positions ``[a, b)`` widened to whole passages (:meth:`_passage_index`), ``reach`` more
        on each side."""
        number, _ = self._passage_index()
        first, last = int(number[a]) - reach, int(number[max(b - 1, a)]) + reach
        return int(np.searchsorted(number, first, "left")), int(np.searchsorted(number, last, "right"))

    def keyed(self, keys: set[str], reach: int = 1) -> np.ndarray:
        """The positions (ascending int64) of the tokens of every passage (:meth:`_passage_index`: a
        line) in which each of ``keys`` (case-folded words: a question's names and numbers,
        :func:`question_keys`) occurs, in that passage or in one of the ``reach`` passages before it (a
        heading names what the lines under it are about; a paragraph may name its subject by a pronoun
        only). Empty when no passage holds them all."""
        number, found = self._passage_index()
        hit: np.ndarray | None = None
        for key in keys:
            at = found.get(key, np.empty(0, np.int64))
            near = np.unique(np.concatenate([at + k for k in range(reach + 1)]))
            hit = near if hit is None else np.intersect1d(hit, near, assume_unique=True)
        if hit is None or not len(hit):
            return np.empty(0, np.int64)
        return np.flatnonzero(np.isin(number, hit)).astype(np.int64)

    def positions(self, token: int) -> np.ndarray:
        """The positions (ascending, int64) where ``token`` occurs; empty when it does not."""
        i = int(np.searchsorted(self.vocab, token))
        if i == len(self.vocab) or int(self.vocab[i]) != token:
            return np.empty(0, np.int64)
        return self.order[self.first[i] : self.first[i + 1]]

    def sentence(self, a: int, b: int, reach: int = 40) -> tuple[int, int]:
        """Positions ``[a, b)`` widened to the whole sentence(s) they fall in: back to just after a token
        that ends a sentence (. ! or ?, then closing quotes) or holds a line break, forward to the first
        such token; at most ``reach`` tokens each way (a side with no boundary in reach stays)."""
        toks, n = self.tokens, len(self.tokens)
        left = a
        for i in range(a - 1, max(-1, a - 1 - reach), -1):
            if i < 0 or _ends_sentence(self.piece(int(toks[i]))):
                left = i + 1
                break
        else:
            left = 0 if a - 1 - reach < 0 else a
        right = b
        if not (b > a and _ends_sentence(self.piece(int(toks[b - 1])))):
            for i in range(b, min(n, b + reach)):
                if _ends_sentence(self.piece(int(toks[i]))):
                    right = i + 1
                    break
            else:
                right = n if b + reach >= n else b
        return left, right

    def starts(self, token: int) -> np.ndarray:
        """The positions where a quote whose first token is ``token`` may start: every occurrence of a
        document token with the same :func:`word_key` (ascending, int64; empty when none)."""
        same = self.keys.get(word_key(self.piece(token)), [])
        if not same:
            return np.empty(0, np.int64)
        return np.unique(np.concatenate([self.positions(t) for t in same]))


@dataclass(frozen=True, slots=True)
class QuoteParams:
    """How a quote-first answer is decoded. ``max_tokens``: the longest quote (it is ended there)."""

    constrained: bool = True
    restate: bool = False  # the answer follows the quote and the question again (the caller's scaffold)
    one_sentence: bool = True  # a constrained quote ends with the document's sentence
    max_tokens: int = 64
    names: bool = False  # refuse when the quoted sentence lacks a name or number of the question
    gate: bool = False  # ask the model whether the quote answers the question; "no" refuses
    gate_yes: float = 0.5  # the gate's "yes" stands when its probability (yes vs no) is at least this
    specifics: bool = False  # refuse an answer that names a name or number found in neither quote nor question
    keyed: bool = False  # a quote starts only in a passage (a line) holding the question's names and numbers
    topics: bool = False  # refuse when the passages around the quote lack what the question is about (topics)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"quote max_tokens must be >= 1, got {self.max_tokens}")


#: How the server answers quote-first (``mode: "quote"``): a constrained quote that starts in a passage
#: holding the question's names and numbers (none when no passage does), refused when the passages around
#: it never mention what the question asks about (:func:`topics`), or when the answer names a name or number
#: that neither the question nor those passages hold (bench/results/quality.md).
SERVED = QuoteParams(names=True, specifics=True, keyed=True, topics=True)


@dataclass(frozen=True, slots=True)
class QuoteTokens:
    """A model's token sets for quoting: ``breaks`` end a quote (tokens spelling only whitespace with a
    line break), ``none`` start the word that says there is no passage (``none``, ``None``, with and
    without a leading space). Sorted int64 arrays."""

    breaks: np.ndarray
    none: np.ndarray
    yes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # first tokens of "yes" / "no":
    no: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # the gate's two answers
    marks: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # opening quotation marks

    @classmethod
    def of(cls, tokenize: Callable[[str], Sequence[int]]) -> QuoteTokens:
        """From the model's tokenizer (``text -> ids``, special tokens off)."""

        def firsts(*words: str) -> np.ndarray:
            return np.array(sorted({ids[0] for w in words if (ids := list(tokenize(w)))}), np.int64)

        breaks = {ids[0] for s in ("\n", "\n\n", " \n") if len(ids := list(tokenize(s))) == 1}
        return cls(
            np.array(sorted(breaks), np.int64),
            firsts("none", " none", "None", " None"),
            firsts("yes", " yes", "Yes", " Yes"),
            firsts("no", " no", "No", " No"),
            firsts('"', ' "', "\u201c", " \u201c", "'", " '", "\u2018", " \u2018", "\u00ab", " \u00ab"),
        )


class Quoting:
    """One answer's quote: the constraint while it is written (:meth:`choose`, :meth:`push`), then what
    it became: :attr:`ids`, :attr:`span` (document token positions ``[a, b)``), :attr:`verified`,
    :attr:`none`.

    ``scaffold``: the token ids decoded after the quote's line break, before the answer (``Answer:``,
    or the question again then ``Answer:``). ``piece``: token id -> bytes. ``verify``: quote text ->
    whether the document's text holds it (spec/cite.py ``QuoteFinder``), for a quote written freely;
    without it such a quote is checked token by token. ``question``: its names and numbers are looked
    for in the quoted sentence (``params.names``). ``gate``: the tokens that ask the model, after the
    quote, whether it answers the question (``params.gate``; its reply is chosen between yes and no).
    """

    def __init__(
        self,
        index: QuoteIndex,
        tokens: QuoteTokens,
        params: QuoteParams,
        scaffold: Sequence[int],
        piece: Callable[[int], bytes],
        refusal: str,
        verify: Callable[[str], bool] | None = None,
        question: str = "",
        gate: Sequence[int] = (),
    ) -> None:
        self.index, self.tokens, self.params = index, tokens, params
        self.scaffold = [int(t) for t in scaffold]
        self.gate_scaffold = [int(t) for t in gate]
        self.piece, self.refusal, self.verify = piece, refusal, verify
        self.question = question
        self.keys = question_keys(question) if params.names or params.keyed else set()
        # Where the quote may start (params.keyed): the passages that hold the question's names and
        # numbers; None when anywhere (not keyed, or a question without any), empty when nowhere.
        self.region = index.keyed(self.keys) if params.keyed and self.keys else None
        self.claims: set[str] = set()  # an answer's names and numbers its quote lacks (params.specifics)
        self.topics = topics(question) if params.topics else set()  # what the quote's passages must mention
        self._gaps: set[str] | None = None  # the topics they lack (:attr:`gaps`), once the quote ended
        self.answered: bool | None = None  # the gate's reply: True (yes), False (no), None (not asked)
        self.p_none: float | None = None  # the probability of "none" as the quote's first token
        self.n_lead = 0  # tokens before the quote's first word: whitespace, line breaks, an opening mark
        self.p_yes: float | None = None  # the gate's probability of yes (against yes and no)
        self.ids: list[int] = []  # the quote's tokens, without the token that ended it
        self.matches: np.ndarray | None = None  # positions of the next document token of each matched span
        self.lost = False  # the quote stopped matching the document (unconstrained only)
        self.done = False
        self.none = False
        self.found: bool | None = None  # a free quote's text check (``verify``), once it ended

    # -- while the quote is written -------------------------------------------------------------------
    def allowed(self) -> np.ndarray:
        """The token ids the next quote token is chosen from (constrained), sorted int64."""
        idx, t = self.index, self.tokens
        if self.matches is None:  # the first token: any document token but a bare line break, or "none"
            vocab = idx.vocab if self.region is None else np.unique(idx.tokens[self.region])
            first = np.setdiff1d(vocab.astype(np.int64), t.breaks, assume_unique=True)
            return np.union1d(first, t.none)
        following = self.matches[self.matches < len(idx.tokens)]
        return np.union1d(np.unique(idx.tokens[following]).astype(np.int64), t.breaks)

    def choose(self, sampler: Sampler, row: np.ndarray) -> int:
        """The next quote token from logits ``row`` (float32 [n_vocab]): the sampler's choice, among
        :meth:`allowed` when constrained. Greedy takes the allowed id with the highest logit; sampling
        draws from the distribution renormalised over the allowed ids (other logits set to -inf).
        The first token is the model's free choice when it spells a word the document has (in any
        case, with or without a space: :meth:`QuoteIndex.starts`) or ``none``; only otherwise is it
        chosen among the document's tokens (``none`` no longer among them, unless nothing else is)."""
        if self.matches is None and not self.ids:
            self.p_none = _mass(row, self.tokens.none)
        if not self.params.constrained:
            return sampler.choose(row)
        if self.matches is None:
            token = sampler.choose(row)
            if token in self.tokens.none or self._leads(token) or len(self._starts(token)):
                return token
        allowed = self.allowed()
        if self.matches is None and len(allowed) > len(self.tokens.none):
            # "none" is the model's own first choice or nothing: a model that wanted to start its quote
            # with a word the passages do not have ("The population of Austria ...", where a table holds
            # it) quotes the likeliest start they have, not the refusal it gave 0.3 %.
            allowed = np.setdiff1d(allowed, self.tokens.none, assume_unique=True)
        if sampler.params.greedy:
            return int(allowed[int(np.argmax(row[allowed]))])
        masked = np.full_like(row, -np.inf)
        masked[allowed] = row[allowed]
        return sampler.choose(masked)

    def push(self, token: int) -> bool:
        """Add the chosen ``token``; True when it ends the quote (a line break in it, ``none`` as the
        first word, or the quote's length limit)."""
        token = int(token)
        first = self.matches is None
        if first and token in self.tokens.none:
            self.none = self.done = True
            return True
        if first and self._leads(token):  # "Quote:" then a space, a line break or an opening mark
            self.n_lead += 1
            return False
        text = self.piece(token)
        if b"\n" in text:
            head = text.split(b"\n", 1)[0]
            if head.strip():  # ".\n": the quote's last token, then the break
                self._match(token, first, head)
                self.ids.append(token)
            self._end()
            return True
        self._match(token, first)
        self.ids.append(token)
        if len(self.ids) >= self.params.max_tokens or (self.params.constrained and self._ends_sentence(text)):
            self._end()
        return self.done

    MAX_LEAD = 3  # tokens a quote may start with before its first word

    def _starts(self, token: int) -> np.ndarray:
        """Where a quote whose first token is ``token`` may start (:meth:`QuoteIndex.starts`), within
        :attr:`region` when it is keyed."""
        starts = self.index.starts(token)
        if self.region is None:
            return starts
        return np.intersect1d(starts, self.region, assume_unique=True)

    def _leads(self, token: int) -> bool:
        """``token`` may come before the quote's first word: whitespace (line breaks included: the quote
        may start on the next line) or an opening quotation mark, at most :data:`MAX_LEAD` of them."""
        if self.ids or self.n_lead >= self.MAX_LEAD:
            return False
        return not self.piece(token).strip() or token in self.tokens.marks

    def _ends_sentence(self, text: bytes) -> bool:
        """The quote's last token (``text``) ends a sentence of the document: it ends with . ! or ?
        (and closing quotes or brackets), and every matched span goes on with whitespace or ends."""
        if not self.params.one_sentence:
            return False
        if not text.rstrip(b"\"')]\xe2\x80\x9d\xe2\x80\x99").endswith((b".", b"!", b"?")) or self.matches is None:
            return False
        idx, m = self.index, self.matches
        inside = m[m < len(idx.tokens)]
        return all(self.piece(int(t))[:1].isspace() for t in np.unique(idx.tokens[inside]))

    def _end(self) -> None:
        self.done = True
        text = self.quote_text()
        self.none = text.casefold().rstrip(".") in NONE_WORDS
        if not self.params.constrained and self.verify is not None and not self.none:
            self.found = bool(text) and self.verify(text)

    def _match(self, token: int, first: bool, head: bytes | None = None) -> None:
        """Narrow :attr:`matches` to the spans the quote still follows after ``token``. ``head``: the
        part of a quote-ending token before its line break, which may stand for a document token that
        does not hold the break ("." where the model wrote ".\n")."""
        idx = self.index
        if first:
            self.matches = self._starts(token) + 1
        else:
            m = self.matches
            m = m[m < len(idx.tokens)]
            same = m[idx.tokens[m] == token]
            if not len(same) and head is not None:
                same = np.array([p for p in m[:64] if self.piece(int(idx.tokens[p])).startswith(head)], np.int64)
            self.matches = same + 1
        if not len(self.matches):
            self.lost = True

    # -- what the quote became ------------------------------------------------------------------------
    @property
    def verified(self) -> bool:
        """The quote is in the document (not ``none``, at least one token): a span of its tokens, or
        for a free quote with a text check (``verify``), a passage of its text."""
        if not self.ids or self.none:
            return False
        if self.found is not None:
            return self.found
        return not self.lost and self.matches is not None

    @property
    def span(self) -> tuple[int, int] | None:
        """Document token positions ``[a, b)`` of the quote (its first occurrence), when it is a span of
        the document's tokens."""
        if not self.ids or self.none or self.lost or self.matches is None:
            return None
        b = int(self.matches[0])
        return b - len(self.ids), b

    def quote_text(self) -> str:
        """The quote as the model wrote it, without the surrounding whitespace or the line break that
        ended it (UTF-8, invalid bytes replaced)."""
        raw = b"".join(self.piece(t) for t in self.ids).split(b"\n", 1)[0]
        return raw.decode("utf-8", errors="replace").strip()

    def sentence(self) -> tuple[int, int] | None:
        """The document token positions of the whole sentence(s) the quote is in (:meth:`QuoteIndex.sentence`)."""
        span = self.span
        return None if span is None else self.index.sentence(*span)

    def sentence_text(self) -> str:
        """The document's text of :meth:`sentence` ("" when the quote is not a span of its tokens)."""
        span = self.sentence()
        if span is None:
            return ""
        raw = b"".join(self.piece(int(t)) for t in self.index.tokens[span[0] : span[1]])
        return raw.decode("utf-8", errors="replace").strip()

    def context_text(self) -> str:
        """The text around the quote: its passage and the one on each side (:meth:`QuoteIndex.around`),
        or its sentence when it is no span of the document."""
        span = self.span
        if span is None:
            return self.sentence_text() or self.quote_text()
        a, b = self.index.around(*span)
        return b"".join(self.piece(int(t)) for t in self.index.tokens[a:b]).decode("utf-8", errors="replace")

    @property
    def gaps(self) -> set[str]:
        """The question's :func:`topics` that the text around the quote (:meth:`context_text`) lacks
        (:func:`uncovered`); empty without ``params.topics`` or before the quote ended."""
        if not self.topics or not self.done or not self.verified:  # "none", or no quote: refused already
            return set()
        if self._gaps is None:
            self._gaps = uncovered(self.topics, self.context_text())
        return self._gaps

    @property
    def supported(self) -> bool:
        """The quoted sentence holds every name and number of the question (``params.names``; keyed, the
        quote started in :attr:`region`), the text around it mentions what the question is about
        (``params.topics``: no :attr:`gaps`), and the gate, if asked, said yes."""
        if self.answered is False or self.gaps:
            return False
        if not self.keys:
            return True
        if self.region is not None:  # keyed: it started in a passage that holds them (or not at all)
            span = self.span
            return span is not None and bool(np.isin(span[0], self.region))
        words = {fold(w) for w in re.findall(r"[\w'\u2019-]+", self.sentence_text() or self.quote_text())}
        return self.keys <= words

    @property
    def refuses(self) -> bool:
        """The answer is the refusal: the quote says ``none``, is not in the document, or does not
        support an answer (:attr:`supported`)."""
        return self.done and (not self.verified or not self.supported)

    def gate_choice(self, row: np.ndarray) -> int:
        """The gate's reply from logits ``row``: its most likely yes or no token; the reply is yes when
        the probability of the yes tokens, against yes and no together, is at least ``gate_yes``."""
        choices = np.concatenate([self.tokens.yes, self.tokens.no])
        token = int(choices[int(np.argmax(row[choices]))])
        yes, no = _mass(row, self.tokens.yes), _mass(row, self.tokens.no)
        self.p_yes = yes / (yes + no) if yes + no > 0 else 0.0
        self.answered = self.p_yes >= self.params.gate_yes
        return token

    def unsupported(self, question: str, answer: str) -> set[str]:
        """The names and numbers of ``answer`` (:func:`specifics`) that neither the question nor the
        text around the quote has: its passage and the one on each side (:meth:`QuoteIndex.around`),
        or its sentence when it is no span of the document. What the answer would claim beyond what
        it quoted. The quote often stops at the end of its passage's first sentence and the value asked
        for is in the next ("The ferry ... leaves Pier 2 for Morrow at 07:40 ... The crossing takes 35
        minutes."): checked against the sentence alone, a right "35 minutes" was refused."""
        return specifics(answer) - (words(self.context_text()) | words(question))
