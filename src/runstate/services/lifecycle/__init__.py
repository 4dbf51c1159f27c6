"""What a server does by itself while it runs: the sweeper."""
