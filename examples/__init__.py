"""Runnable examples; each has a test under tests/examples that runs it in the harness (and on Spark)."""
