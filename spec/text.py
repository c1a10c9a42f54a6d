"""Incremental detokenisation for streaming: UTF-8 safe, with stop strings held back.

A token can end in the middle of a multi-byte character (byte-fallback vocabularies do this for
emoji and CJK), so bytes go through an incremental UTF-8 decoder that keeps an incomplete tail until
its next byte arrives; when generation ends (EOS, ``max_tokens``, a stop string, cancellation, a
full context) an incomplete tail is dropped, never turned into U+FFFD, so no answer ends in part of a
character (issue 27: a 4-byte hieroglyph is 4 byte-fallback tokens, and a cut between them left
U+FFFD). Bytes that can never be UTF-8 (0xFF, a lead byte followed by a non-continuation byte) still
decode to U+FFFD where they occur: that is what the model wrote.

Text that could still become the start of a stop string is held back until it cannot, so a stop
string is never streamed. Whitespace before the answer's first visible character is not emitted: the
space a tokenizer writes before the first word (" Berlin.", issue 29), or a line break after the
prompt's "Answer:", is the prompt's layout, not the answer. Stop strings are matched on the text as
decoded, before that.
"""

from __future__ import annotations

import codecs


class TextStream:
    """Feed token bytes with :meth:`push`; it returns text that is safe to send now."""

    def __init__(self, stops: tuple[str, ...] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(s for s in stops if s)
        self._pending = ""
        self._started = False  # a visible character was emitted: whitespace is text from here on
        self.stopped = False
        self.text = ""  # everything emitted so far

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the text that can be emitted (possibly "")."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        cut = self._first_stop()
        if cut is not None:
            out, self._pending, self.stopped = self._pending[:cut], "", True
        else:
            hold = self._held_back()
            out = self._pending[: len(self._pending) - hold]
            self._pending = self._pending[len(self._pending) - hold :]
        return self._emit(out)

    def flush(self) -> str:
        """End of generation: release held-back text (never a whole stop string); an incomplete
        UTF-8 sequence still buffered in the decoder (the answer was cut inside a character) is
        dropped."""
        if self.stopped:
            return ""
        self._decoder.reset()  # discards the buffered bytes of an incomplete character
        out = self._pending
        self._pending = ""
        cut = self._first_stop_in(out)
        if cut is not None:
            out, self.stopped = out[:cut], True
        return self._emit(out)

    def _emit(self, out: str) -> str:
        if not self._started:
            out = out.lstrip()
            self._started = bool(out)
        self.text += out
        return out

    def _first_stop(self) -> int | None:
        return self._first_stop_in(self._pending)

    def _first_stop_in(self, text: str) -> int | None:
        hits = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        return min(hits) if hits else None

    def _held_back(self) -> int:
        """Length of the longest suffix of the pending text that is a proper prefix of a stop string."""
        best = 0
        for s in self._stops:
            for k in range(min(len(s) - 1, len(self._pending)), best, -1):
                if self._pending.endswith(s[:k]):
                    best = k
                    break
        return best
