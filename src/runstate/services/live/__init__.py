"""Live streams: events as broker messages (``messages``), the gap-free
``taskProgress``/``sessionActivity`` streams (``streams``), and the catch-up
checks of quiet streams (``catch_up``)."""
