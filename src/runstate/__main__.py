"""`python -m runstate` is the `runstate` command."""

from runstate.cli import main

main()
