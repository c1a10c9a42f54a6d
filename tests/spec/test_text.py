from spec.text import TextStream


def test_multibyte_character_is_never_split():
    stream = TextStream()
    emoji = "😀".encode()
    out = [stream.push(emoji[:1]), stream.push(emoji[1:3]), stream.push(emoji[3:])]
    assert out == ["", "", "😀"]
    assert stream.flush() == ""


def test_stop_string_is_held_back_then_cut():
    stream = TextStream(stops=("\nQuestion:",))
    assert stream.push(b"Paris.") == "Paris."
    assert stream.push(b"\nQue") == ""  # might become the stop string
    assert stream.push(b"stion: what") == ""
    assert stream.stopped and stream.text == "Paris."


def test_held_back_text_is_released_when_it_diverges():
    stream = TextStream(stops=("\nQuestion:",))
    assert stream.push(b"a\nQu") == "a"
    assert stream.push(b"ick") == "\nQuick"


def test_flush_releases_a_partial_stop_prefix():
    stream = TextStream(stops=("END",))
    assert stream.push(b"the EN") == "the "
    assert stream.flush() == "EN"


def test_invalid_bytes_become_replacement_characters():
    stream = TextStream()
    assert stream.push(b"\xff") + stream.flush() == "\ufffd"


def test_earliest_of_several_stops_wins():
    stream = TextStream(stops=("B", "A"))
    assert stream.push(b"xxAyyB") == "xx"


def test_flush_drops_an_incomplete_character():
    # Issue 27: max_tokens cut a 4-byte hieroglyph after 1..3 of its byte tokens; flush gave U+FFFD.
    glyph = "\U00013000".encode()
    for cut in (1, 2, 3):
        stream = TextStream()
        out = stream.push(b"ab") + stream.push(glyph) + stream.push(glyph[:cut]) + stream.flush()
        assert out == "ab\U00013000" == stream.text


def test_flush_drops_an_incomplete_character_after_a_held_back_stop_prefix():
    stream = TextStream(stops=("END",))
    assert stream.push(b"x EN" + "😀".encode()[:2]) == "x "
    assert stream.flush() == "EN"


def test_a_broken_sequence_mid_stream_is_still_replaced():
    # A lead byte followed by a non-continuation byte is what the model wrote, not a cut.
    stream = TextStream()
    assert stream.push(b"\xf0\x9f") + stream.push(b"a") + stream.flush() == "\ufffda"


def test_the_answer_does_not_start_with_the_prompts_whitespace():
    """Issue 29: " Berlin." came out with the space the tokenizer puts before the first word."""
    stream = TextStream(("\nQuestion:",))
    assert [stream.push(p) for p in (b" ", b" Berlin", b".", b" It")] == ["", "Berlin", ".", " It"]
    assert stream.text == "Berlin. It"
    lines = TextStream()
    assert lines.push(b"\n") == "" and lines.push(b"\nThe") == "The" and lines.push(b"\n") == "\n"


def test_a_stop_string_at_the_very_start_still_stops():
    stream = TextStream(("\nQuestion:",))
    assert stream.push(b"\nQuestion:") == "" and stream.stopped and stream.text == ""
