"""The per-key-group save/restore step (committed rows) shared by Spark's state modes and the test harnesses."""
