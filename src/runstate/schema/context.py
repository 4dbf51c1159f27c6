"""What every resolver gets: the caller and the settings."""

from __future__ import annotations

from dataclasses import dataclass

import strawberry

from runstate.auth import Principal
from runstate.settings import Settings


@dataclass
class Context:
    """Per-request context, built by the GraphQL view after authentication."""

    principal: Principal | None
    settings: Settings
    connection_params: dict[str, object] | None = None
    """The graphql-transport-ws ``connection_init`` payload, set by Strawberry."""

    @property
    def user_id(self) -> str:
        """The caller's user id; a request without a caller never reaches a resolver."""
        if self.principal is None:
            raise PermissionError("no authenticated caller")
        return self.principal.user_id


Info = strawberry.Info[Context, None]
