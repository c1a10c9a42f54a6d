"""The passages a quote may start in (store/passages.py): BM25 over a document's passages, in memory,
with every word of the question (no stopword list) in any language."""

from __future__ import annotations

import threading

from store.passages import PassageRanks, question_grams, question_words

PASSAGES = [
    "Normandy is a region in France.",
    "Cologne has about a million people and is the largest city of its state in Germany.",
    "Hamburg, in Germany, has the country's biggest port, on the Elbe.",
    "Das Skript kostet in A5 gedruckt 10 Euro.",
    "| 2 | Nordwind Hosting GmbH | 2026-02-28 | j.krause@nordwind.example |",
]


def test_the_passage_sharing_the_rarest_words_ranks_first():
    ranks = PassageRanks(PASSAGES)
    # "Germany" is in two passages; "port" and "biggest" only in Hamburg's: the keyed quote of issue 34
    # could start only where "Germany" was, and quoted Cologne's population.
    assert ranks.best("What city has the biggest port in Germany?", 2) == [2, 1]
    assert ranks.best("Wie viel kostet das gedruckte Skript?", 1) == [3]
    assert ranks.best("What is the contact email for Nordwind Hosting GmbH?", 1) == [4]
    assert ranks.best("¿Qué?", 3) == [] and ranks.best("", 3) == []  # no word of any passage


def test_passages_sharing_no_word_are_filled_by_the_letters_they_share():
    """An English question about a German text shares no word with it ("script" is not "Skript"): the
    slots word matches leave are filled by character trigrams; word matches always come first."""
    german = ["Topologie ist ein Teilgebiet der Mathematik.", PASSAGES[3], "Die Vorlesung war im Winter."]
    ranks = PassageRanks(german)
    assert ranks.best("How much does the printed script cost?", 1) == [1]  # "Skript", "kostet"
    assert ranks.best("Hamburg port", 1) == []  # no word and no trigram of any passage
    assert PassageRanks(PASSAGES).best("Hamburg port", 3)[:1] == [2]  # the word match first, then letters
    assert question_grams("Who is it?") == ["who"]  # words of three letters or more only


def test_question_words_keep_every_word_once_and_split_unspaced_scripts():
    assert question_words("Who? who, WHO and a 7") == ["who", "and", "7"]
    assert question_words("石桥是哪个朝代建的？")[:2] == ["石桥", "桥是"]


def test_ranks_may_be_asked_from_several_threads():
    ranks = PassageRanks(PASSAGES * 50)
    out: list[list[int]] = []
    threads = [threading.Thread(target=lambda: out.append(ranks.best("biggest port", 1))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 8 and all(r and PASSAGES[r[0] % 5].startswith("Hamburg") for r in out)


def test_the_passages_holding_a_quoted_text_whatever_its_case_and_marks():
    ranks = PassageRanks(
        ["Alice was tired.", "There was nothing so _very_ remarkable in that; nor did Alice mind.", "Very remarkable."]
    )
    assert ranks.holding("There was nothing so VERY remarkable in that", 5) == [1]
    assert ranks.holding("nothing so remarkable", 5) == [], "the words in a row, not anywhere"
    assert sorted(ranks.holding("very remarkable", 5)) == [1, 2]
    assert ranks.holding("...", 5) == []


def test_quoted_text_of_four_words_or_more_points_at_its_passage():
    from store.passages import quoted

    question = "Copy, word for word, the paragraph that begins with 'There was nothing so VERY remarkable in that'."
    assert quoted(question) == ["There was nothing so VERY remarkable in that"]
    assert quoted("Zitiere den Satz „für 10 Euro gibt es“ bitte.") == ["für 10 Euro gibt es"]
    assert quoted("Où est « le plus grand des écrivains » ?") == ["le plus grand des écrivains"]
    assert quoted('Who are genetically considered “kin”? What is the "Davidian Revolution"?') == [], "terms, not places"
    assert quoted("What is Alice's cat's name, and the Rabbit's?") == [], "apostrophes open no quotation"
    assert quoted("Copy the paragraph beginning 'Alice's sister was reading a book'.") == [
        "Alice's sister was reading a book"
    ], "an apostrophe inside single quotes"
    assert quoted("\u300c王医生在北京工作了十年\u300d是什么意思？") == ["王医生在北京工作了十年"], "unspaced: bigrams"
