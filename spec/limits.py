"""The draft-window limits every layer reads: one home for 16 and 17.

A verify call decodes the last emitted token plus up to ``MAX_WINDOW`` draft tokens, so it has at
most ``MAX_ROWS`` rows; the public report this project measures against verified 16 drafts per call
(../shared/notes/anchors.md). On hybrid models the window is further capped by the context's
``n_rs_seq`` (recurrent rollback depth, notes §5).
"""

from __future__ import annotations

#: Widest verification window: draft tokens per verify call.
MAX_WINDOW = 16
#: Rows of the widest verify call (the last emitted token + MAX_WINDOW drafts).
MAX_ROWS = MAX_WINDOW + 1
#: MTP draft tokens per step: acceptance falls with depth on a single nextn head (notes §2.2).
MAX_MTP_DRAFT = 3
