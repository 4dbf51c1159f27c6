"""The write engine: a task write as one conditional UPDATE and its changes
(``engine``), writes sharing a transaction on SQLite (``group_commit``), and
transactions the database aborted tried again (``retry``)."""
