"""The document store: rows (SQLite or PostgreSQL), each document's files and the checked readers of them,
disk space, and the segment and collection indexes."""
