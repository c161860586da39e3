"""The service's SQLite store: schema, rows, the lock that keeps one service per store."""
