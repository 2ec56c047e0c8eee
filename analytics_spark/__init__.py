"""PySpark jobs and pure DataFrame transforms over audit data."""
