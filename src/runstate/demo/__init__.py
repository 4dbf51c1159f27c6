"""``runstate demo``: agents that book trips through the SDK (``trips``) and a
LangGraph graph on ``RunstateSaver`` (``graph``). Clients of the server, never
part of it."""
