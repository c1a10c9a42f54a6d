"""Quote-first answers: the model first copies the passage of the document that answers the question,
then the model itself judges whether that passage answers it, then it answers.

The answer is written in parts after the question: ``Quote: <a span of the document>`` up to a line
break; then, judged (``judge`` scaffolding), the model's yes or no to whether the quote answers the
question; then ``Answer:`` and the answer. :class:`QuoteConstraint` is the constraint
(spec/constraint.py) that writes the first parts:

* **The quote** is a span of the document's tokens by construction: each token is chosen among the
  tokens that continue a span the quote matches so far (:class:`QuoteIndex`), a line break (the quote
  ends), and at the first token only, ``none`` (no passage answers). The first token is the model's
  free choice when it starts a word of the passages the quote may start in (``region``: the caller's
  retrieval, the passages that best match the question; None: anywhere).
  It ends at a line break, at the end of the document's sentence, or at :attr:`QuoteParams.max_tokens`.
* **The judgment**: ``judge`` tokens are forced after the quote: a turn of the same conversation that
  restates the passage the quote is in (its sentence; a table row after its header row) and the
  question, and asks whether the passage answers it. The probability of the model's reply being yes
  (against no) is the quote's support; a ``support`` function (spec/support.py) decides from it, and a
  quote judged not to answer ends the answer with the refusal and a one-line reason.
* **The answer**: after a yes, ``answer`` scaffolding (``Answer:``) is forced and the model answers
  freely; the quote is shown (its document sentence) once it stands.

Every token of the quote is the model's own choice among the allowed ones, and speculative decoding
stays exact with respect to that choice: verification applies the same choice to each verify row, in
order (spec/loop.py). Forced scaffolding is decoded as the rows of one step.

Cost: the first quote token considers every distinct document token (one ``argmax`` over at most a few
thousand ids); each later one only the continuations of the spans still matched, which narrow to a
handful after a few tokens. Building the index is one ``argsort`` of the document's tokens; the judgment
is one decode of the ``judge`` tokens (the passage and the question again: a hundred rows or so) in the
answer's own sequence.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec.constraint import choose_among
from spec.events import TokenEvent
from spec.sampling import Sampler

_CLOSERS = b"\"')]\xe2\x80\x9d\xe2\x80\x99"  # closing quotes and brackets (UTF-8 bytes of the typographic ones)


def _ends_sentence(piece: bytes) -> bool:
    """A token that ends a sentence: it holds a line break, or ends with . ! or ? (before closers)."""
    return b"\n" in piece or piece.rstrip().rstrip(_CLOSERS).endswith((b".", b"!", b"?"))


def _goes_on(before: bytes, after: bytes) -> bool:
    """A period that does not end its sentence although whitespace follows: ``before`` (the text up to
    and including the period, one or two tokens) ends with a word of at most three letters, and
    ``after`` (the next one or two tokens: a tokenizer may write the space and the digit apart) starts
    with a digit after its whitespace: a label and its number ("No. 7", "Fig. 3", "S. 12",
    "Nr. 5"), in any language written with spaces (no word list). A year or a number before the period
    ("in 1872. 7 men") still ends its sentence."""
    if not _label(before):
        return False
    nxt = after.decode("utf-8", errors="replace").lstrip()[:1]
    return nxt.isdigit() and b"\n" not in after[: len(after) - len(after.lstrip())]


#: Opening quotation marks and what closes each: ” closes “, “ or ” closes „ (German, Polish), » closes «,
#: " closes ". A closing mark with nothing open (the quote started inside a quotation) is passed over.
_HEADING = re.compile(r" {0,3}#{1,6}\s")  # a Markdown heading line, as CommonMark indents one (QuoteIndex._sections)
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")  # a line that opens or closes fenced code
_CLOSE = {"\u201c": "\u201d", "\u201e": "\u201c\u201d", "\u00ab": "\u00bb", '"': '"'}


def nest(marks: list[str], text: str, before: str = "") -> str:
    """Follow the quotation marks of ``text`` (the next characters of a quote) in ``marks``, the marks
    open so far, innermost last: a mark that closes the innermost one pops it, an opening one is
    pushed; a straight ``"`` opens only after whitespace, a bracket, another mark or at the quote's
    start (``before``: the character before ``text``, "" at the start), so the closing ``"`` of a
    quotation the quote started inside is passed over. Returns the last character seen. A sentence
    does not end inside a quotation the quote opened (“Oh dear! Oh dear! I shall be late!”)."""
    for ch in text:
        if marks and ch in _CLOSE[marks[-1]]:
            marks.pop()
        elif ch in _CLOSE and (ch != '"' or not before or before.isspace() or before in "([{" or before in _CLOSE):
            marks.append(ch)
        before = ch
    return before


def _label(before: bytes) -> bool:
    """``before`` ends with a word of at most three letters and a period (:func:`_goes_on`)."""
    head = before.decode("utf-8", errors="replace").rstrip()
    if not head.endswith(".") or head.endswith(".."):
        return False
    words = head[:-1].split()
    return bool(words) and words[-1].isalpha() and len(words[-1]) <= 3


def word_key(piece: bytes) -> bytes:
    """What a quote's first token must share with a document token to start at it: the token's text
    without surrounding whitespace, case-folded (a quote may start "There" where the document says
    " there")."""
    return piece.strip().decode("utf-8", errors="replace").casefold().encode()


def mass(row: np.ndarray, ids: np.ndarray) -> float:
    """The softmax probability of ``ids`` together under logits ``row`` (float32 [n_vocab])."""
    if not len(ids):
        return 0.0
    top = float(row.max())
    return float(np.exp(row[ids].astype(np.float64) - top).sum() / np.exp(row.astype(np.float64) - top).sum())


class QuoteIndex:
    """Where each token occurs in a document's tokens (int32 [n_doc], the document part of its prompt
    prefix, without the scaffolding around it), and its lines; ``piece``: token id -> bytes."""

    def __init__(self, tokens: np.ndarray, piece: Callable[[int], bytes]) -> None:
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int32)  # [n_doc]
        self.order = np.argsort(self.tokens, kind="stable").astype(np.int64)  # positions, sorted by token
        self.vocab, first = np.unique(self.tokens[self.order], return_index=True)  # distinct tokens, sorted
        self.first = np.append(first, len(self.tokens)).astype(np.int64)  # [len(vocab) + 1]
        self.piece = piece
        self._lines: tuple[np.ndarray, np.ndarray] | None = None  # _line_index
        self._numbers: frozenset[str] | None = None  # numbers
        self._headings: tuple[np.ndarray, np.ndarray] | None = None  # _sections
        self.keys: dict[bytes, list[int]] = {}  # word_key -> the document's tokens spelling it
        for t in self.vocab.tolist():
            if key := word_key(piece(t)):
                self.keys.setdefault(key, []).append(t)

    def _line_index(self) -> tuple[np.ndarray, np.ndarray]:
        """The document's lines: their first token positions (int64 [n_lines + 1], the last one
        ``n_doc``), and whether each is a table row (bool [n_lines]: it starts with ``|``). A line ends
        after a token holding a line break. Built once, at the first quote that needs it: O(n_doc)."""
        if self._lines is None:
            n = len(self.tokens)
            pieces = {int(t): self.piece(int(t)) for t in self.vocab.tolist()}
            breaks = np.array([b"\n" in pieces[int(t)] for t in self.vocab.tolist()], bool)
            end_at = breaks[np.searchsorted(self.vocab, self.tokens)] if n else np.empty(0, bool)
            cuts = [0, *(np.flatnonzero(end_at) + 1).tolist()]
            if cuts[-1] != n:
                cuts.append(n)
            rows = [
                b"".join(pieces[int(t)] for t in self.tokens[a:b].tolist()).lstrip().startswith(b"|")
                for a, b in zip(cuts, cuts[1:], strict=False)
            ]
            self._lines = np.array(cuts, np.int64), np.array(rows, bool)
        return self._lines

    def passages(self) -> list[tuple[int, int]]:
        """The document's passages as token positions ``[a, b)``, in order: its sentences (a line of
        prose cut after each token that ends a sentence, ". ! ?", when the next token starts with
        whitespace), each other line without one, and each table row (a line starting with ``|``, read
        with its header row: :meth:`header`); a blank line belongs to the passage before it. A Markdown
        heading is no passage: each passage of its section is read after it (:meth:`heading`), and alone
        it was judged to answer what its section says ("# The ferry to Morrow" cited for "35 minutes").
        What a quote's start is ranked by (the caller's retrieval, :meth:`region`)."""
        starts, rows = self._line_index()
        titled, _ = self._sections()
        out: list[tuple[int, int]] = []
        for i in range(len(rows)):
            a, b = int(starts[i]), int(starts[i + 1])
            line = self.text(a, b)
            if not line.strip() or titled[i]:
                if out and not line.strip():
                    out[-1] = (out[-1][0], b)
                continue
            cut = a
            if not rows[i]:
                pieces = [self.piece(int(t)) for t in self.tokens[a:b]]
                last = max((j for j, piece in enumerate(pieces) if piece.strip()), default=-1)  # its last word
                for j in range(last):
                    if _ends_sentence(pieces[j]) and pieces[j + 1][:1].isspace() and self.ends_sentence(a + j):
                        out.append((cut, a + j + 1))
                        cut = a + j + 1
            out.append((cut, b))
        return out

    def region(self, spans: Sequence[tuple[int, int]]) -> np.ndarray:
        """The token positions (ascending int64) of the passages ``spans`` (:meth:`passages`)."""
        if not spans:
            return np.empty(0, np.int64)
        return np.unique(np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans]))

    def header(self, a: int) -> tuple[int, int] | None:
        """The token positions ``[a, b)`` of the header row of the table that position ``a`` is in: the
        first row of the run of table rows (lines starting with ``|``) around it; None when ``a`` is in
        no table, or in its header row. A table's cells are described by its header: a row alone
        ("| 2 | Nordwind Hosting GmbH | ... | 2026-02-28 |") does not say which value is the contract's end."""
        starts, rows = self._line_index()
        line = int(np.searchsorted(starts, a, "right")) - 1
        if line < 0 or line >= len(rows) or not rows[line]:
            return None
        first = line
        while first > 0 and rows[first - 1]:
            first -= 1
        return None if first == line else (int(starts[first]), int(starts[first + 1]))

    def heading(self, a: int) -> tuple[int, int] | None:
        """The token positions ``[a, b)`` of the heading of the section that position ``a`` is in: the last
        heading line (:meth:`_sections`) before ``a``'s line; None when there is none, or ``a`` is in a
        heading. A section's sentences are described by its heading as a table's cells are by its header
        row: "It takes 35 minutes." does not say what takes them; under "# The ferry to Morrow" it does."""
        starts, _ = self._line_index()
        _, above = self._sections()
        line = int(np.searchsorted(starts, a, "right")) - 1
        if not 0 <= line < len(above) or above[line] < 0:
            return None
        h = int(above[line])
        return int(starts[h]), int(starts[h + 1])

    def _sections(self) -> tuple[np.ndarray, np.ndarray]:
        """Which lines are headings (bool [n_lines]: Markdown ``#`` to ``######`` and a space, as the
        extractors write a document's headings and a sheet's name, outside fenced code, where "# " starts a
        comment), and each line's heading line above it (int64 [n_lines], -1: none). Built once: O(n_doc)."""
        if self._headings is None:
            starts, _ = self._line_index()
            titled, above, fenced, last = [], [], False, -1
            for i in range(len(starts) - 1):
                line = self.text(int(starts[i]), int(starts[i + 1]))
                fenced ^= _FENCE.match(line) is not None
                titled.append(not fenced and _HEADING.match(line) is not None)
                above.append(-1 if titled[-1] else last)
                last = i if titled[-1] else last
            self._headings = np.array(titled, bool), np.array(above, np.int64)
        return self._headings

    def positions(self, token: int) -> np.ndarray:
        """The positions (ascending, int64) where ``token`` occurs; empty when it does not."""
        i = int(np.searchsorted(self.vocab, token))
        if i == len(self.vocab) or int(self.vocab[i]) != token:
            return np.empty(0, np.int64)
        return self.order[self.first[i] : self.first[i + 1]]

    def ends_sentence(self, i: int) -> bool:
        """The token at position ``i`` ends a sentence: it holds a line break, or ends with . ! or ?
        (before closers) where the text does not go on (:func:`_goes_on`: "No. 7")."""
        toks = self.tokens
        piece = self.piece(int(toks[i]))
        if not _ends_sentence(piece):
            return False
        if b"\n" in piece or i + 1 >= len(toks):
            return True
        before = (self.piece(int(toks[i - 1])) if i else b"") + piece
        return not _goes_on(before, b"".join(self.piece(int(t)) for t in toks[i + 1 : i + 3]))

    def sentence(self, a: int, b: int, reach: int = 40) -> tuple[int, int]:
        """Positions ``[a, b)`` widened to the whole sentence(s) they fall in: back to just after a token
        that ends a sentence (. ! or ?, then closing quotes) or holds a line break, forward to the first
        such token; at most ``reach`` tokens each way (a side with no boundary in reach stays)."""
        n = len(self.tokens)
        left = a
        for i in range(a - 1, max(-1, a - 1 - reach), -1):
            if i < 0 or self.ends_sentence(i):
                left = i + 1
                break
        else:
            left = 0 if a - 1 - reach < 0 else a
        right = b
        if not (b > a and self.ends_sentence(b - 1)):
            for i in range(b, min(n, b + reach)):
                if self.ends_sentence(i):
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

    @property
    def numbers(self) -> frozenset[str]:
        """Every run of digits in the document's text (Unicode digits as ASCII), built once: O(n_doc)."""
        if self._numbers is None:
            text = self.text(0, len(self.tokens))
            self._numbers = frozenset(str(int(n)) for n in re.findall(r"\d+", text))
        return self._numbers

    def reading(self, a: int, b: int, max_header: int = 128) -> str:
        """Positions ``[a, b)`` as a judgment reads them: their text, after the heading of their section
        (:meth:`heading`) and the header row of the table they are in (:meth:`header`), at most
        ``max_header`` tokens of each, stripped."""
        heads = [
            self.text(x, min(y, x + max_header)).strip() for x, y in filter(None, (self.heading(a), self.header(a)))
        ]
        return "\n".join([*filter(None, heads), self.text(a, b).strip()])

    def text(self, a: int, b: int) -> str:
        """The document's text of token positions ``[a, b)`` (UTF-8, invalid bytes replaced)."""
        return b"".join(self.piece(int(t)) for t in self.tokens[a:b]).decode("utf-8", errors="replace")


#: The probability of yes, when the model is asked whether a passage answers the question, at or above
#: which it supports an answer: the highest that keeps the answerable questions refused at most 10 % of
#: the time on the sets written elsewhere (SQuAD 2.0's "Normans" article and bench/real_sets.py's real
#: files, pooled: 8 % at 0.65, 14 % at 0.7; bench/results/quality.md).
THRESHOLD = 0.65
#: The passages that best match the question that are judged, the quote starting in the best-judged one:
#: on SQuAD Normans the best 5 hold the gold answer for 88 of 96 answerable questions, the best 3 for 79
#: (bench/results/quality.md).
PASSAGES = 5


@dataclass(frozen=True, slots=True)
class QuoteParams:
    """How a quote-first answer is decoded. ``max_tokens``: the longest quote (it is ended there);
    ``threshold``: the model is asked whether its quote answers the question, and the quote supports
    an answer when its probability of yes is at least this (spec/support.py); None: not asked, every
    quote stands. ``passages``: the quote starts in one of the document's passages that best match the
    question (BM25, store/passages.py), this many; None: anywhere."""

    max_tokens: int = 64
    threshold: float | None = THRESHOLD
    passages: int | None = PASSAGES

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"quote max_tokens must be >= 1, got {self.max_tokens}")
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"quote threshold must be in [0, 1], got {self.threshold}")
        if self.passages is not None and self.passages < 1:
            raise ValueError(f"quote passages must be >= 1, got {self.passages}")

    @property
    def judged(self) -> bool:
        return self.threshold is not None


@dataclass(frozen=True, slots=True)
class QuoteTokens:
    """A model's token sets for quoting: ``breaks`` end a quote (tokens spelling only whitespace with a
    line break), ``none`` start the word that says there is no passage (``none``, ``None``, with and
    without a leading space), ``yes`` and ``no`` the first tokens of the judgment's two replies,
    ``marks`` opening quotation marks. Sorted int64 arrays."""

    breaks: np.ndarray
    none: np.ndarray
    yes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    no: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    marks: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @classmethod
    def of(cls, tokenize: Callable[[str], Sequence[int]], none: str, yes: str, no: str) -> QuoteTokens:
        """From the model's tokenizer (``text -> ids``, special tokens off) and the words the prompts ask
        the model to reply with (ingest/prompt.py ``QUOTE_REPLIES``), each as written, capitalised, and
        after a space."""

        def firsts(*words: str) -> np.ndarray:
            return np.array(sorted({ids[0] for w in words if (ids := list(tokenize(w)))}), np.int64)

        def forms(word: str) -> np.ndarray:
            return firsts(word, " " + word, word.capitalize(), " " + word.capitalize())

        breaks = {ids[0] for s in ("\n", "\n\n", " \n") if len(ids := list(tokenize(s))) == 1}
        return cls(
            np.array(sorted(breaks), np.int64),
            forms(none),
            forms(yes),
            forms(no),
            firsts('"', ' "', "\u201c", " \u201c", "'", " '", "\u2018", " \u2018", "\u00ab", " \u00ab"),
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a quote supports an answer to the question, and when it does not, why: ``reason`` (one
    line) and ``kind``, one of :data:`REFUSALS`."""

    supported: bool
    reason: str = ""
    kind: str = ""


#: Why an answer was refused, as a word a client can act on: ``number`` (the question names a number the
#: document never has), ``no_passage`` (no passage shares a word or letters with the question),
#: ``not_answered`` (the closest passages were judged and none answers: a question about the document as
#: a whole is one, and may be asked again directly), ``none`` (the model quoted no passage, or judged its
#: quote not to answer), ``not_read_yet`` (set by the server: answered from the part read so far).
REFUSALS = ("number", "no_passage", "not_answered", "none", "not_read_yet")


@dataclass(frozen=True, slots=True)
class Judged:
    """A question's candidate passages judged before the quote (spec/support.py ``PassageJudge``):
    ``best`` (the index of the one chosen among them; None when none was judged), the model's
    probability of yes for it (``p_yes``), and the :class:`Verdict`."""

    best: int | None
    p_yes: float | None
    verdict: Verdict


#: A quote and the model's probability that it answers the question -> the verdict (spec/support.py).
Support = Callable[["QuoteConstraint", float], Verdict]

QUOTING, JUDGING, SCAFFOLD, REFUSING, DONE = "quoting", "judging", "scaffold", "refusing", "done"


class QuoteConstraint:
    """One answer's quote, as a constraint (spec/constraint.py): the quote while it is written, then
    the judgment and the answer's scaffolding, forced; then what it became: :attr:`ids`, :attr:`span`
    (document token positions ``[a, b)``), :attr:`none`, :attr:`p_yes`, :attr:`verdict`.

    ``judge``: the passage the quote is in (:meth:`passage`) -> the tokens forced after the quote's
    line break to ask whether that passage answers the question (ingest/prompt.py ``quote_judge``, which
    restates the passage and the question; None: not asked); ``answer``: the tokens forced before the
    answer (``Answer:``); ``support`` decides from the reply (needed when ``judge`` is given);
    ``refusal``: the answer when no quote supports one; ``region``: the token positions the quote may
    start at (the passages that best match the question, server/engine/sequence.py), None: anywhere;
    ``judged``: the passages were judged before the quote (spec/support.py ``PassageJudge``; ``region``
    is then the chosen passage): a refusal is the answer at once, nothing quoted; a passage judged to
    answer is quoted (``none`` may not start the quote: refusing is the judgment's, not the quote's) and
    needs no judgment after it; ``closest``: then, the passage judged likeliest (document token
    positions), which a refusal names as the passage that came closest (:meth:`sentence`).
    """

    def __init__(
        self,
        index: QuoteIndex,
        tokens: QuoteTokens,
        params: QuoteParams,
        piece: Callable[[int], bytes],
        refusal: str,
        answer: Sequence[int],
        judge: Callable[[str], Sequence[int]] | None = None,
        support: Support | None = None,
        region: np.ndarray | None = None,
        judged: Judged | None = None,
        closest: tuple[int, int] | None = None,
    ) -> None:
        if judge is not None and support is None:
            raise ValueError("a judged quote needs a support function")
        self.index, self.tokens, self.params, self.piece = index, tokens, params, piece
        self.refusal = refusal
        self._answer = [int(t) for t in answer]
        self._judge = judge
        self.support = support
        self.region = region  # token positions a quote may start at (int64, ascending); None: anywhere
        self.phase = QUOTING
        self._forced: list[int] = []  # scaffolding still to decode
        self.finish: str | None = None  # "stop" once the constraint ended the answer with the refusal
        self.ids: list[int] = []  # the quote's tokens, without the token that ended it
        self.matches: np.ndarray | None = None  # positions of the next document token of each matched span
        self.n_lead = 0  # tokens before the quote's first word: whitespace, line breaks, an opening mark
        self._marks: list[str] = []  # quotation marks the quote opened and has not closed (:func:`nest`)
        self._text = codecs.getincrementaldecoder("utf-8")("ignore")  # the quote's characters, as they come
        self._before = ""  # the quote's last character so far
        self.none = False  # the model's first choice was "none": no passage answers
        self.p_none: float | None = None  # the probability of "none" as the quote's first token
        self.p_yes: float | None = None  # the judgment's probability of yes (against yes and no)
        self.verdict: Verdict | None = None
        self.closest = closest
        self._may_say_none = judged is None  # a passage judged to answer is quoted, never "none"
        if judged is not None:
            self.p_yes = judged.p_yes
            if not judged.verdict.supported:
                self.phase, self.verdict = REFUSING, judged.verdict

    @property
    def judged_first(self) -> bool:
        """The passages were judged before the quote (``judged``): its answer stands on that judgment."""
        return not self._may_say_none

    # -- the Constraint protocol --------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.phase == DONE

    def forced(self) -> list[int]:
        return list(self._forced)

    def choose(self, sampler: Sampler, row: np.ndarray) -> int:
        if self.phase == JUDGING:
            return self._judge_reply(row)
        if self.phase == REFUSING:  # never shown (its push ends the answer with the refusal), never an end
            return int(self.tokens.none[0]) if len(self.tokens.none) else int(self.tokens.breaks[0])
        first = self.matches is None
        if first and not self.ids:
            if self.p_none is None:
                self.p_none = mass(row, self.tokens.none)
            token = sampler.choose(row)
            if (self._may_say_none and token in self.tokens.none) or self._leads(token) or len(self._starts(token)):
                return token
        allowed = self.allowed()
        if first and self._may_say_none and len(allowed) > len(self.tokens.none):
            # "none" is the model's own first choice or nothing: a model that wanted to start its quote
            # with a word the document does not have quotes the likeliest start it has.
            allowed = np.setdiff1d(allowed, self.tokens.none, assume_unique=True)
        return choose_among(sampler, row, allowed)

    def push(self, token: int) -> list[TokenEvent]:
        token = int(token)
        if self._forced:
            self._forced.pop(0)
            if not self._forced and self.phase == SCAFFOLD:
                self.phase = DONE
            return []
        if self.phase == JUDGING:
            return self._judged()
        if self.phase == REFUSING:
            return self._refuse()
        if self._push_quote(token):
            return self._quoted()
        return []

    # -- the quote ------------------------------------------------------------------------------------
    def allowed(self) -> np.ndarray:
        """The token ids the next quote token is chosen from, sorted int64."""
        idx, t = self.index, self.tokens
        if self.matches is None:  # the first token: any document token but a bare line break, or "none"
            vocab = idx.vocab if self.region is None else np.unique(idx.tokens[self.region])
            first = np.setdiff1d(vocab.astype(np.int64), t.breaks, assume_unique=True)
            return np.union1d(first, t.none) if self._may_say_none else first
        following = self.matches[self.matches < len(idx.tokens)]
        return np.union1d(np.unique(idx.tokens[following]).astype(np.int64), t.breaks)

    MAX_LEAD = 3  # tokens a quote may start with before its first word

    def _starts(self, token: int) -> np.ndarray:
        """Where a quote whose first token is ``token`` may start (:meth:`QuoteIndex.starts`), within
        :attr:`region` when there is one."""
        starts = self.index.starts(token)
        return starts if self.region is None else np.intersect1d(starts, self.region, assume_unique=True)

    def _leads(self, token: int) -> bool:
        """``token`` may come before the quote's first word: whitespace (line breaks included: the quote
        may start on the next line) or an opening quotation mark, at most :data:`MAX_LEAD` of them."""
        if self.ids or self.n_lead >= self.MAX_LEAD:
            return False
        return not self.piece(token).strip() or token in self.tokens.marks

    def _push_quote(self, token: int) -> bool:
        """Add the chosen quote ``token``; True when it ends the quote (a line break in it, ``none`` as
        the first word, the end of the document's sentence, or the quote's length limit)."""
        first = self.matches is None
        if first and self._may_say_none and token in self.tokens.none:
            self.none = True
            return True
        if first and self._leads(token):  # "Quote:" then a space, a line break or an opening mark
            self.n_lead += 1
            self._follow_marks(self.piece(token))
            return False
        text = self.piece(token)
        if b"\n" in text:
            head = text.split(b"\n", 1)[0]
            if head.strip():  # ".\n": the quote's last token, then the break
                self._match(token, first, head)
                self.ids.append(token)
            return True
        self._match(token, first)
        self.ids.append(token)
        self._follow_marks(text)
        return len(self.ids) >= self.params.max_tokens or self._ends_sentence(text)

    def _follow_marks(self, piece: bytes) -> None:
        """The quotation marks the quote opens and closes (:func:`nest`), a mark split across tokens
        included (the bytes are decoded as they come)."""
        self._before = nest(self._marks, self._text.decode(piece), self._before)

    def _ends_sentence(self, text: bytes) -> bool:
        """The quote's last token (``text``) ends a sentence of the document: it ends with . ! or ?
        (and closing quotes or brackets), outside any quotation the quote opened, and every matched span
        goes on with whitespace or ends."""
        if self.matches is None or self._marks:
            return False
        if not text.rstrip(_CLOSERS):  # a closing mark alone (“Go.” as “Go." then ”): the tokens before it
            text = b"".join(self.piece(t) for t in self.ids[-3:])
        if not text.rstrip(_CLOSERS).endswith((b".", b"!", b"?")):
            return False
        idx, m = self.index, self.matches
        inside = m[m < len(idx.tokens)]
        if not all(self.piece(int(t))[:1].isspace() for t in np.unique(idx.tokens[inside])):
            return False
        before, n = b"".join(self.piece(t) for t in self.ids[-2:]), len(idx.tokens)
        if not _label(before):  # the usual case: no look further
            return True
        return not any(
            _goes_on(before, b"".join(self.piece(int(t)) for t in idx.tokens[i : min(n, i + 2)]))
            for i in inside.tolist()
        )

    def _match(self, token: int, first: bool, head: bytes | None = None) -> None:
        """Narrow :attr:`matches` to the spans the quote still follows after ``token``. ``head``: the
        part of a quote-ending token before its line break, which may stand for a document token that
        does not hold the break ("." where the model wrote ".\\n")."""
        idx = self.index
        if first:
            self.matches = self._starts(token) + 1
            return
        m = self.matches
        m = m[m < len(idx.tokens)]
        same = m[idx.tokens[m] == token]
        if not len(same) and head is not None:
            same = np.array([p for p in m[:64] if self.piece(int(idx.tokens[p])).startswith(head)], np.int64)
        self.matches = same + 1

    def _quoted(self) -> list[TokenEvent]:
        """The quote ended: ``none`` (or nothing quoted) refuses; otherwise the judgment is asked, or,
        unjudged, the quote stands."""
        if self.none or self.span is None:
            self.verdict = Verdict(False, "No passage of the document answers the question.", "none")
            return self._refuse()
        if self._judge is not None:
            self.phase, self._forced = JUDGING, [int(t) for t in self._judge(self.passage())]
            return []
        self.verdict = Verdict(True)
        return self._stands()

    # -- the judgment -----------------------------------------------------------------------------------
    def _judge_reply(self, row: np.ndarray) -> int:
        """The reply to the judgment from logits ``row``: its probability of yes decides (:attr:`support`);
        the reply is the most likely token of the decided side, so the answer follows a yes."""
        yes, no = mass(row, self.tokens.yes), mass(row, self.tokens.no)
        self.p_yes = yes / (yes + no) if yes + no > 0 else 0.0
        self.verdict = self.support(self, self.p_yes)
        side = self.tokens.yes if self.verdict.supported else self.tokens.no
        return int(side[int(np.argmax(row[side]))])

    def _judged(self) -> list[TokenEvent]:
        return self._stands() if self.verdict.supported else self._refuse()

    def _stands(self) -> list[TokenEvent]:
        """The quote stands: it is shown (its document sentence) and the answer's scaffolding is next."""
        self.phase, self._forced = SCAFFOLD, list(self._answer)
        if not self._forced:
            self.phase = DONE
        return [TokenEvent(self.sentence_text() or self.quote_text(), tuple(self.ids), 0, part="quote")]

    def _refuse(self) -> list[TokenEvent]:
        self.phase, self.finish = DONE, "stop"
        return [TokenEvent(self.refusal, (), 0)]

    # -- what the quote became ------------------------------------------------------------------------
    @property
    def refused(self) -> bool:
        """The answer is the refusal (the quote says ``none``, or does not support an answer)."""
        return self.verdict is not None and not self.verdict.supported

    @property
    def reason(self) -> str:
        """Why the answer was refused (one line); "" when it was not."""
        return self.verdict.reason if self.refused else ""

    @property
    def refusal_kind(self) -> str:
        """Why the answer was refused, one of :data:`REFUSALS`; "" when it was not."""
        return self.verdict.kind if self.refused else ""

    @property
    def span(self) -> tuple[int, int] | None:
        """Document token positions ``[a, b)`` of the quote (its first occurrence)."""
        if not self.ids or self.none or self.matches is None or not len(self.matches):
            return None
        b = int(self.matches[0])
        return b - len(self.ids), b

    def quote_text(self) -> str:
        """The quote as the model wrote it, without the surrounding whitespace or the line break that
        ended it (UTF-8, invalid bytes replaced)."""
        raw = b"".join(self.piece(t) for t in self.ids).split(b"\n", 1)[0]
        return raw.decode("utf-8", errors="replace").strip()

    def sentence(self) -> tuple[int, int] | None:
        """The document token positions of the whole sentence(s) the quote is in (:meth:`QuoteIndex.sentence`);
        for an answer refused before its quote, the passage that came closest (None when none did)."""
        span = self.span
        if span is None:
            return self.closest if self.refused else None
        return self.index.sentence(*span)

    def sentence_text(self) -> str:
        """The document's text of :meth:`sentence` ("" when there is no quote)."""
        span = self.sentence()
        return "" if span is None else self.index.text(*span).strip()

    MAX_HEADER = 128  # tokens of a table's header row read with a row (a wide table's are cut)

    def passage(self) -> str:
        """What the quote says, as the judgment reads it: its sentence, after its table's header row
        when it is a table row (:meth:`QuoteIndex.header`, at most :data:`MAX_HEADER` tokens of it).
        At most MAX_HEADER + max_tokens + 80 tokens (QuoteIndex.sentence reaches 40 each way)."""
        span = self.sentence()
        return "" if span is None else self.index.reading(*span, max_header=self.MAX_HEADER)
