"""The sets of issue 34's benchmark, by name (bench/quality.py and bench/answer_modes.py ``--sets``):
TPO and QuALITY (bench/qa_sets.py), the hard needles and two more needle sets made after the topic check
(bench/needle_sets.py), the counterfactual and injection sets (bench/world_sets.py), and from
bench/quality_sets.py the 10-page PDF and the README's example questions, and questions about real
files (bench/real_sets.py). The same seed gives the same documents and questions."""

from __future__ import annotations

import random

from bench import needle_sets, qa_sets, real_sets, world_sets
from bench.quality_sets import Doc, examples_doc, pdf10_doc

SETS = (
    "tpo", "quality", "needles", "counterfactual", "injection", "pdf10", "examples", "real", "needles-b", "needles-c",
    "squad", "real-b",
)  # fmt: skip


def build_sets(seed: int, names: tuple[str, ...] = SETS) -> list[Doc]:
    """The documents of the named sets (:data:`SETS`) for ``seed``."""
    rng, used = random.Random(seed), set()

    def needles(layout, templates, name: str) -> list[Doc]:
        return needle_sets.needle_docs(rng, used, layout, templates, name)

    makers = {
        "tpo": qa_sets.tpo_docs,
        "quality": qa_sets.quality_docs,
        "needles": lambda: needle_sets.needle_docs(rng, used),
        "counterfactual": world_sets.counterfactual_docs,
        "injection": lambda: world_sets.injection_docs(rng, used),
        "pdf10": lambda: [pdf10_doc(rng, used)],
        "examples": lambda: [examples_doc()],
        "real": real_sets.real_docs,
        "needles-b": lambda: needles(needle_sets.LAYOUT_B, needle_sets.TEMPLATES_B, "needles-b"),
        "needles-c": lambda: needles(needle_sets.LAYOUT_C, needle_sets.TEMPLATES_C, "needles-c"),
        "squad": qa_sets.squad_docs,
        "real-b": real_sets.real_b_docs,
    }
    docs: list[Doc] = []
    # Always in this order, so a seed makes the same documents whatever is asked; a set made later never
    # changes an earlier one, so those after the last one asked are not made.
    last = max((SETS.index(n) for n in names if n in SETS), default=-1)
    for name in SETS[: last + 1]:
        made = makers[name]()
        if name in names:
            docs += made
    return docs
