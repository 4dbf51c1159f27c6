"""What every resolver gets: the caller and the settings."""

from __future__ import annotations

from dataclasses import dataclass

import strawberry

from runstate.auth import Principal
from runstate.ratelimit import RateLimiter
from runstate.settings import Settings


@dataclass
class Context:
    """Per-request context, built by the GraphQL view after authentication."""

    principal: Principal | None
    settings: Settings
    connection_params: dict[str, object] | None = None
    """The graphql-transport-ws ``connection_init`` payload, set by Strawberry."""
    limiter: RateLimiter | None = None
    """The per-user rate limit; None when it is switched off."""

    async def charge(self, points: float) -> None:
        """Pay ``points`` from the caller's budget; RateLimitedError when it cannot."""
        if self.limiter is not None:
            await self.limiter.charge(self.user_id, points)

    @property
    def user_id(self) -> str:
        """The caller's user id; a request without a caller never reaches a resolver."""
        if self.principal is None:
            raise PermissionError("no authenticated caller")
        return self.principal.user_id


Info = strawberry.Info[Context, None]
