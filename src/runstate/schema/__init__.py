"""Strawberry types, inputs and Problem members of the public contract."""
