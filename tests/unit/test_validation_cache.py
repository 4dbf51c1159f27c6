"""The limits are validation rules built once per schema, so graphql-core's
validation cache hits on every repeat of a document."""

from __future__ import annotations

from typing import Any

from strawberry.extensions.validation_cache import DEFAULT_MAXSIZE, _get_validate_cache

from runstate.schema.build import schema


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
