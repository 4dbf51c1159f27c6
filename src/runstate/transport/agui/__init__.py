"""AG-UI: a task served as a live AG-UI run over SSE, resumable by cursor, its
decisions answered as AG-UI interrupts (``docs/agui.md``)."""
