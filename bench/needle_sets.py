"""The needle set of bench/quality.py: invented facts planted in Gutenberg text of about 2k, 8k and 24k
tokens, at 10/30/50/70/90 % depth, and questions whose answer the document does not hold, made hard.

An absent question is about something the document nearly says:

* ``attribute``: an entity the document has a planted fact about, asked for a fact it does not give
  (the cook of the Hall whose head gardener it names; the dog of the miller whose cat it names; the
  weight of the crate whose serial number it gives);
* ``entity``: the same kind of fact as one planted, about an entity the document never mentions (the
  captain of the ferry to another island).

Sizes (the defaults of :func:`needle_docs`): 4 documents of 2k tokens (5 needles, 5 absent each),
3 of 8k (10 needles, 4 absent), 1 of 24k (10 needles, 8 absent): 60 answerable questions and 40
absent ones. The same seed gives the same documents and questions.
"""

from __future__ import annotations

import random

from bench.quality_sets import CHARS_PER_TOKEN, DEPTHS, Doc, Item, _gutenberg, _plant, _slice, _value, _word

# (statement, question, value kind, a question about the same entity that the statement does not answer)
TEMPLATES = [
    ("The archive code of the {e} ledger is {v}.", "What is the archive code of the {e} ledger?", "code",
     "What colour is the cover of the {e} ledger?"),
    ("The ferry to {e} Island was captained by {v}.", "Who captained the ferry to {e} Island?", "name",
     "Who built the ferry to {e} Island?"),
    ("The bridge at {e} Ford was opened on {v}.", "On what date was the bridge at {e} Ford opened?", "date",
     "Who designed the bridge at {e} Ford?"),
    ("The keeper of the {e} lighthouse counted {v} ships in a single night.",
     "How many ships did the keeper of the {e} lighthouse count in a single night?", "number",
     "What was the name of the dog of the keeper of the {e} lighthouse?"),
    ("The crate shipped from {e} was stamped with the serial number {v}.",
     "What serial number was stamped on the crate shipped from {e}?", "code",
     "How much did the crate shipped from {e} weigh?"),
    ("The head gardener of {e} Hall was {v}.", "Who was the head gardener of {e} Hall?", "name",
     "Who was the cook of {e} Hall?"),
    ("The treaty of {e} was signed on {v}.", "On what date was the treaty of {e} signed?", "date",
     "Who signed the treaty of {e} for the king?"),
    ("The bell of {e} chapel weighs {v} kilograms.", "How many kilograms does the bell of {e} chapel weigh?",
     "number", "In what year was the bell of {e} chapel cast?"),
    ("The locker of the {e} rowing club opens with the code {v}.",
     "What code opens the locker of the {e} rowing club?", "code",
     "How many members does the {e} rowing club have?"),
    ("The first map of the {e} valley was drawn by {v}.", "Who drew the first map of the {e} valley?", "name",
     "In what year was the first map of the {e} valley printed?"),
    ("The miller of {e} kept a cat called {v}.", "What was the name of the cat of the miller of {e}?", "pet",
     "What was the name of the dog of the miller of {e}?"),
    ("The {e} library was founded on {v}.", "On what date was the {e} library founded?", "date",
     "On what date did the {e} library close?"),
    ("The orchard at {e} had {v} apple trees.", "How many apple trees did the orchard at {e} have?", "number",
     "How many pear trees did the orchard at {e} have?"),
    ("The schooner {e} was commanded by {v}.", "Who commanded the schooner {e}?", "name",
     "Who was the cook on the schooner {e}?"),
]  # fmt: skip

#: (name, source, start fraction, tokens, needles per depth, absent questions), in document order.
LAYOUT = [
    ("needles-2k-a", "alice-in-wonderland-pg11.txt", 0.05, 2000, 1, 5),
    ("needles-2k-b", "around-the-world-in-80-days-pg103.txt", 0.10, 2000, 1, 5),
    ("needles-2k-c", "alice-in-wonderland-pg11.txt", 0.55, 2000, 1, 5),
    ("needles-2k-d", "around-the-world-in-80-days-pg103.txt", 0.62, 2000, 1, 5),
    ("needles-8k-a", "alice-in-wonderland-pg11.txt", 0.20, 8000, 2, 4),
    ("needles-8k-b", "around-the-world-in-80-days-pg103.txt", 0.30, 8000, 2, 4),
    ("needles-8k-c", "around-the-world-in-80-days-pg103.txt", 0.75, 8000, 2, 4),
    ("needles-24k", "around-the-world-in-80-days-pg103.txt", 0.02, 24000, 2, 8),
]


def _fact_value(kind: str, rng: random.Random) -> tuple[str, list[list[str]]]:
    if kind == "pet":
        name = _word(rng, 3)
        return name, [[name]]
    return _value(kind, rng)


def _entity(rng: random.Random, used: set[str]) -> str:
    e = _word(rng)
    while e in used:
        e = _word(rng)
    used.add(e)
    return e


def needle_doc(
    name: str, source: str, start: float, n_tokens: int, per_depth: int, n_absent: int, rng, used,
    templates=TEMPLATES, set_name: str = "needles",
) -> Doc:  # fmt: skip
    """One document: ``per_depth`` needles at each depth of DEPTHS, then ``n_absent`` hard absent
    questions (alternately ``attribute`` and ``entity``), each with its kind in the qid."""
    table = templates
    base = _slice(_gutenberg(source), start, int(n_tokens * CHARS_PER_TOKEN))
    n = per_depth * len(DEPTHS)
    templates = rng.sample(range(len(table)), n)
    planted, items = [], []
    for k, t in enumerate(templates):
        statement, question, kind, _ = table[t]
        e = _entity(rng, used)
        v, accept = _fact_value(kind, rng)
        depth = DEPTHS[k % len(DEPTHS)]
        sentence = statement.format(e=e, v=v)
        planted.append((depth + 0.04 * (k // len(DEPTHS)), sentence))
        items.append(
            Item(
                f"{name}-d{int(depth * 100)}-{k}",
                question.format(e=e),
                "exact",
                v,
                accept=accept,
                needle=sentence,
                depth=depth,
            )  # fmt: skip
        )
    for j in range(n_absent):
        t = templates[j % n]
        statement, question, _, attribute = table[t]
        if j % 2 == 0:  # the planted entity, a fact the document does not give
            e = planted_entity(statement, items[j % n].needle)
            items.append(Item(f"{name}-absent-attribute{j}", attribute.format(e=e), "refusal", ""))
        else:  # the planted kind of fact, about an entity the document never names
            items.append(Item(f"{name}-absent-entity{j}", question.format(e=_entity(rng, used)), "refusal", ""))
    return Doc(name, set_name, f"{name}.txt", _plant(base, planted), items)


def planted_entity(statement: str, sentence: str) -> str:
    """The ``{e}`` of template ``statement`` in the planted ``sentence``."""
    head, rest = statement.split("{e}", 1)
    tail = rest.split("{v}", 1)[0]
    return sentence[len(head) :].split(tail, 1)[0] if tail else sentence[len(head) :]


def needle_docs(
    rng: random.Random, used: set[str], layout=LAYOUT, templates=TEMPLATES, set_name: str = "needles"
) -> list[Doc]:
    """The needle documents of ``layout`` made from ``templates`` (default: the ``needles`` set, :data:`LAYOUT`
    and :data:`TEMPLATES`; ``needles-b``: :data:`LAYOUT_B`, :data:`TEMPLATES_B`; ``needles-c``: the _C ones)."""
    return [needle_doc(*row, rng, used, templates=templates, set_name=set_name) for row in layout]


# The second needle set (``needles-b``): other templates and other stretches of the same books, written
# after the topic check of spec/quote.py had been designed on the first set, to test it on questions it
# was not made from. Its absent attribute questions are of every kind: about a thing the text does not
# mention (the driver of the coach, the sheriff of the county), and about what it does not say of one it
# does mention (who owned the inn, how wide the well is).
TEMPLATES_B = [
    ("The lantern of the {e} inn was lit each night by {v}.", "Who lit the lantern of the {e} inn each night?",
     "name", "Who owned the {e} inn?"),
    ("The well in {e} square is {v} metres deep.", "How deep is the well in {e} square?", "number",
     "How wide is the well in {e} square?"),
    ("The horse of the {e} mail coach was called {v}.", "What was the horse of the {e} mail coach called?", "pet",
     "What was the name of the driver of the {e} mail coach?"),
    ("The organ of {e} abbey has {v} pipes.", "How many pipes does the organ of {e} abbey have?", "number",
     "How many bells does {e} abbey have?"),
    ("The clock tower of {e} was repaired on {v}.", "On what date was the clock tower of {e} repaired?", "date",
     "On what date was the clock tower of {e} built?"),
    ("The vault of the {e} bank opens with the code {v}.", "What code opens the vault of the {e} bank?", "code",
     "Who guards the vault of the {e} bank?"),
    ("The goat of the {e} farm was named {v}.", "What was the goat of the {e} farm named?", "pet",
     "What was the name of the sheepdog of the {e} farm?"),
    ("The surveyor of {e} county was {v}.", "Who was the surveyor of {e} county?", "name",
     "Who was the sheriff of {e} county?"),
    ("The telegraph office at {e} received {v} messages in its first year.",
     "How many messages did the telegraph office at {e} receive in its first year?", "number",
     "How many clerks worked at the telegraph office at {e}?"),
    ("The mine at {e} was closed on {v}.", "On what date was the mine at {e} closed?", "date",
     "Who owned the mine at {e}?"),
    ("The parcel sent to {e} carried the tracking code {v}.", "What tracking code did the parcel sent to {e} carry?",
     "code", "What did the parcel sent to {e} contain?"),
    ("The violin of the {e} orchestra was made by {v}.", "Who made the violin of the {e} orchestra?", "name",
     "Who conducted the {e} orchestra?"),
    ("The tower of {e} castle is {v} metres tall.", "How tall is the tower of {e} castle?", "number",
     "How tall is the gate of {e} castle?"),
    ("The school at {e} was founded on {v}.", "On what date was the school at {e} founded?", "date",
     "Who was the first teacher of the school at {e}?"),
]  # fmt: skip

#: The rows of ``needles-b`` (as :data:`LAYOUT`): eight 2k-token texts, 40 needles and 40 absent questions.
LAYOUT_B = [
    ("needles-b-1", "alice-in-wonderland-pg11.txt", 0.42, 2000, 1, 5),
    ("needles-b-2", "around-the-world-in-80-days-pg103.txt", 0.40, 2000, 1, 5),
    ("needles-b-3", "alice-in-wonderland-pg11.txt", 0.75, 2000, 1, 5),
    ("needles-b-4", "around-the-world-in-80-days-pg103.txt", 0.47, 2000, 1, 5),
    ("needles-b-5", "alice-in-wonderland-pg11.txt", 0.88, 2000, 1, 5),
    ("needles-b-6", "around-the-world-in-80-days-pg103.txt", 0.52, 2000, 1, 5),
    ("needles-b-7", "around-the-world-in-80-days-pg103.txt", 0.86, 2000, 1, 5),
    ("needles-b-8", "around-the-world-in-80-days-pg103.txt", 0.93, 2000, 1, 5),
]


# The third needle set (``needles-c``), written after the topic check's second form (quantities) to test
# it in turn: other templates, other stretches of the books, and answerable questions that paraphrase
# their statement ("When did the stagecoach make its last journey?" of one that "departed for the last
# time"), so that the check's false refusals show as well as its catches.
TEMPLATES_C = [
    ("The fishing fleet of {e} numbered {v} boats.", "How many boats were in the fishing fleet of {e}?",
     "number", "How many nets did the fishing fleet of {e} carry?"),
    ("The post road to {e} was paved by {v}.", "Who paved the post road to {e}?", "name",
     "How long is the post road to {e}?"),
    ("A flood struck the village of {e} on {v}.", "When did the flood hit the village of {e}?", "date",
     "How many houses did the flood in {e} destroy?"),
    ("The {e} ironworks stamped every rail with the mark {v}.", "What mark did the {e} ironworks put on its rails?",
     "code", "How many workers did the {e} ironworks employ?"),
    ("The innkeeper at {e} crossing kept a parrot named {v}.",
     "What was the name of the parrot of the innkeeper at {e} crossing?", "pet",
     "What was the name of the innkeeper's wife at {e} crossing?"),
    ("The lighthouse on {e} rock burns {v} litres of oil a week.",
     "How much oil does the lighthouse on {e} rock burn in a week?", "number",
     "How tall is the lighthouse on {e} rock?"),
    ("The toll bridge at {e} charged {v} pennies for a cart.", "What was the toll for a cart on the bridge at {e}?",
     "number", "What was the toll for a rider on the bridge at {e}?"),
    ("The regiment stationed at {e} was led by Colonel {v}.", "Who commanded the regiment at {e}?", "name",
     "How many soldiers served in the regiment at {e}?"),
    ("The archives of {e} cathedral list {v} bishops.", "How many bishops do the archives of {e} cathedral list?",
     "number", "Who built {e} cathedral?"),
    ("The stagecoach from {e} departed on {v} for the last time.",
     "When did the stagecoach from {e} make its last journey?", "date", "Who drove the stagecoach from {e}?"),
    ("The observatory at {e} catalogued the comet as {v}.",
     "Under what designation did the observatory at {e} catalogue the comet?", "code",
     "Who discovered the comet catalogued at {e}?"),
    ("The baker of {e} kept a donkey called {v}.", "What was the baker of {e}'s donkey called?", "pet",
     "What did the baker of {e} sell on Sundays?"),
    ("The canal lock at {e} raises boats by {v} centimetres.",
     "By how many centimetres does the canal lock at {e} lift a boat?", "number",
     "How many gates does the canal lock at {e} have?"),
    ("The charter of {e} market was granted by {v}.", "Who granted the charter of {e} market?", "name",
     "On which day of the week is {e} market held?"),
]  # fmt: skip

#: The rows of ``needles-c`` (as :data:`LAYOUT`): eight 2k-token texts, 40 needles and 40 absent questions.
LAYOUT_C = [
    ("needles-c-1", "alice-in-wonderland-pg11.txt", 0.49, 2000, 1, 5),
    ("needles-c-2", "around-the-world-in-80-days-pg103.txt", 0.44, 2000, 1, 5),
    ("needles-c-3", "alice-in-wonderland-pg11.txt", 0.64, 2000, 1, 5),
    ("needles-c-4", "around-the-world-in-80-days-pg103.txt", 0.56, 2000, 1, 5),
    ("needles-c-5", "alice-in-wonderland-pg11.txt", 0.82, 2000, 1, 5),
    ("needles-c-6", "around-the-world-in-80-days-pg103.txt", 0.66, 2000, 1, 5),
    ("needles-c-7", "alice-in-wonderland-pg11.txt", 0.94, 2000, 1, 5),
    ("needles-c-8", "around-the-world-in-80-days-pg103.txt", 0.70, 2000, 1, 5),
]
