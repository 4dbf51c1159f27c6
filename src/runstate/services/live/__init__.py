"""Live streams: events announced after commit and the gap-free
``taskProgress``/``sessionActivity`` streams (``streams``), and the catch-up
checks of quiet streams (``catch_up``)."""
