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
#: Under DOCQA_BATCH_INVARIANT's settings, the largest decode call of the "few rows" regime. Measured on
#: ggml-cpu (llama.cpp as vendored in llama-cpp-python 0.3.36, Gemma 3 270M Q4_K_M,
#: tests/spec/test_invariance.py): a row's logits are bit-identical in every call of 1 to 7 rows and in
#: every call of 8 rows or more, but the two regimes differ by up to ~1.6 logits; with either KV type,
#: flash attention on or off, 1 or 2 threads and with llamafile's sgemm built out. The kernel that
#: switches is not identified yet. So DOCQA_BATCH_INVARIANT keeps every decode call at this many rows
#: or fewer (server/loading.py: draft window at most 6, batched steps split by server/runner.py).
INVARIANT_MAX_ROWS = 7
#: MTP draft tokens per step: acceptance falls with depth on a single nextn head (notes §2.2).
MAX_MTP_DRAFT = 3
