"""What a process tells its operators: the request log and Prometheus metrics.
Imports nothing else of runstate."""
