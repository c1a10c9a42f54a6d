"""Two-turn conversations about Around the World in Eighty Days (Project Gutenberg #103, in
../shared/cases): the first turn names its subject, the follow-up leans on it ("What was its name?",
"Why did she do it?") or changes the subject. ``target``: a phrase of the passage that answers the
follow-up; the right segments are those that contain it. For bench/retrieval.py and
tests/store/test_index.py."""

from __future__ import annotations

AROUND = "text/gutenberg/around-the-world-in-80-days-pg103.txt"

CONVERSATIONS = [
    # (first question, its answer, follow-up, target phrase)
    ("Who is Aouda?", "A young Parsee woman whom Fogg and Passepartout saved from being burned with her dead "
     "husband, the rajah.", "Why did she do it?", '"A suttee," returned the general'),
    ("How much did Fogg pay for the elephant?", "Two thousand pounds, after the Indian had refused lower offers.",
     "What was its name?", "Kiouni—this was the name of the beast"),
    ("Who is John Bunsby?", "The master of the pilot-boat Tankadere.", "How big was his boat?",
     "neat little craft of twenty tons"),
    ("What was stolen from the Bank of England?", "A package of banknotes worth fifty-five thousand pounds.",
     "What reward was offered?", "proffered reward of two thousand pounds"),
    ("How did Phileas Fogg gain a day?", "Travelling eastward, he saw the sun pass the meridian eighty times "
     "while his friends in London saw it seventy-nine times.", "Why was that?",
     "three hundred and sixty degrees"),
    ("Who was to be burned at the suttee?", "The widow of the rajah, a young Parsee woman.",
     "What would her relatives have done to her otherwise?", "shave off her hair"),
    ("How much did Fogg pay for the elephant?", "Two thousand pounds.",
     "Who was the captain of the Henrietta?", 'board the "Henrietta," iron-hulled'),
    ("What did Fix think Fogg had done?", "He believed Fogg was the man who robbed the Bank of England.",
     "What did he wait for in Bombay?", "the warrant"),
]  # fmt: skip
