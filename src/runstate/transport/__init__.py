"""What stands between the network and the GraphQL schema, one concept a module:
the GraphQL view (``view``), the WebSocket protocol handler (``websocket``), bearer
auth (``auth``), the body limit (``body_limit``), the time limit and departed
clients (``deadline``), strict JSON (``strict_json``) and refusals (``refusals``)."""
