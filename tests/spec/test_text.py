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
