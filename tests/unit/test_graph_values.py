"""Base64 from clients (``schema.graphs.decoded``)."""

from __future__ import annotations

import pytest

from runstate.schema.graphs import decoded
from runstate.services.domain.errors import InvalidInputError


def test_base64_is_decoded_and_anything_else_is_invalid_input() -> None:
    """Guards the payloads of putGraphCheckpoint and putGraphWrites: base64 is read
    strictly (characters outside its alphabet, or bad padding, are InvalidInput
    naming the field, never a 500 nor bytes silently dropped). Seen failing with
    the lenient decoding, which drops characters outside the alphabet."""
    assert decoded("aGk=", "payload") == b"hi"
    for bad in ("aGk", "a!Gk=", "not base64 at all"):
        with pytest.raises(InvalidInputError) as refused:
            decoded(bad, "channels[0].payload")
        assert refused.value.field == "channels[0].payload"
