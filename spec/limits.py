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
#: Rows of one sequence per decode call under DOCQA_BATCH_INVARIANT. Measured on ggml-cpu (llama.cpp as
#: vendored in llama-cpp-python 0.3.36, Gemma 3 270M Q4_K_M, tests/spec/test_invariance.py): a
#: sequence's rows are bit-identical whether a call holds 1 or up to 7 of its rows, and move by up to
#: ~1.6 logits from 8 rows on, with either KV type, flash attention on or off, 1 or 2 threads and with
#: llamafile's sgemm built out; the kernel that switches at 8 rows is not identified yet.
INVARIANT_MAX_ROWS = 7
#: Widest draft window under DOCQA_BATCH_INVARIANT (the last token + drafts within INVARIANT_MAX_ROWS).
INVARIANT_MAX_WINDOW = INVARIANT_MAX_ROWS - 1
#: MTP draft tokens per step: acceptance falls with depth on a single nextn head (notes §2.2).
MAX_MTP_DRAFT = 3
