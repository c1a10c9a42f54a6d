"""The draft-window limits every layer reads: one home for 16 and 17.

A verify call decodes the last emitted token plus up to ``MAX_WINDOW`` draft tokens, so it has at
most ``MAX_ROWS`` rows (the public report this project measures against verified 16 drafts per
call). On hybrid models the window is further capped by the context's ``n_rs_seq``: a recurrent
state can be rolled back by at most that many tokens, once, before the next decode.
"""

from __future__ import annotations

#: Widest verification window: draft tokens per verify call.
MAX_WINDOW = 16
#: Rows of the widest verify call (the last emitted token + MAX_WINDOW drafts).
MAX_ROWS = MAX_WINDOW + 1
#: The largest decode call of ggml-cpu's "few rows" regime: from 8 rows on, K-quant matmuls take a tiled
#: kernel (llama.cpp as vendored in llama-cpp-python 0.3.36, ggml/src/ggml-cpu/tiled/tiled.cpp
#: ``ggml_tiled_min_batch``), and a row's logits differ from a one-row call by up to ~1.6 on Gemma 3 270M
#: Q4_K_M (tests/spec/test_invariance.py). DOCQA_BATCH_INVARIANT turns that kernel off
#: (runtime/numerics.py); where a start-up probe finds it still on, it keeps every decode call at this
#: many rows or fewer instead (server/engine/loading.py: draft window at most 6, batches split by
#: server/engine/runner.py).
INVARIANT_MAX_ROWS = 7
#: MTP draft tokens per step: Qwen3.5 ships one nextn head, reused for the drafts past the first, so
#: acceptance falls with depth (llama.cpp's default is 3 drafts; 1-3 is what is recommended).
MAX_MTP_DRAFT = 3
