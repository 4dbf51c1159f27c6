"""What the API asks of the services, one module per record: sessions, tasks,
tool states, leases, recovery, API tokens."""
