"""The database below the services: opening it and migrating, the PostgreSQL
engine, the database clock, and the SQL helpers every write and read uses."""
