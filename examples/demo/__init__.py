"""The demo: an example shop app, a worker and a small load generator, on SQLite."""
