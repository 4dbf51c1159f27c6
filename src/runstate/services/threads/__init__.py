"""LangGraph threads kept as tasks: checkpoints, blobs and pending writes
(``checkpoints``), and node runs as steps (``nodes``)."""
