"""Speculative decoding core: drafters, verification, sampling and the answer loop."""
