"""sqliteq: SQLite storage for varmq."""
