"""runstate: durable, versioned state for AI agents, served over GraphQL."""

__version__ = "0.1.0"
