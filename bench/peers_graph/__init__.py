"""The graph bench/peers.py runs on every system, and the peers' configuration files."""
