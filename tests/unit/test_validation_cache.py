"""The limits are validation rules built once per schema, so graphql-core's
validation cache hits on every repeat of a document."""

from __future__ import annotations

from typing import Any

from strawberry.extensions.validation_cache import DEFAULT_MAXSIZE, _get_validate_cache

from runstate.resolvers.build import build_schema
from runstate.schema.extensions import _parsed

schema = build_schema()


async def test_a_repeated_document_is_validated_once() -> None:
    """Guards building the limit rules once (``build_schema``): rule classes made per
    request, as Strawberry's limiter extensions make them, key every lookup apart,
    and every request was validated again (0 hits; 32% of a server's time)."""
    cache: Any = _get_validate_cache(DEFAULT_MAXSIZE)  # an lru_cache: cache_info()
    document = "query Repeat { __typename }"
    await schema.execute(document)
    before = cache.cache_info()
    for _ in range(5):
        result = await schema.execute(document)
        assert result.errors is None
    after = cache.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (5, 0)


async def test_a_long_document_is_never_cached() -> None:
    """Guards CACHED_DOCUMENT_CHARS: a document over 16 KiB (here a comment makes it
    long) is parsed and validated each time and kept by neither cache, so the
    128-entry caches stay small in bytes too."""
    validations: Any = _get_validate_cache(DEFAULT_MAXSIZE)
    parses: Any = _parsed  # runstate's parser cache (``ParseOnce``)
    document = "# " + "x" * 17_000 + "\nquery Long { __typename }"
    before = (validations.cache_info(), parses.cache_info())
    for _ in range(3):
        result = await schema.execute(document)
        assert result.errors is None
    after = (validations.cache_info(), parses.cache_info())
    assert [(a.hits - b.hits, a.misses - b.misses) for a, b in zip(after, before, strict=True)] == [
        (0, 0),
        (0, 0),
    ]
