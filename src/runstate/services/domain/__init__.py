"""The records' pictures and rules that every other room builds on: views,
domain errors, state machine moves, SQL conditions, input validation, quotas and
rate limits."""
