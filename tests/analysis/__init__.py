"""The analysis package and the run record: torch-free, and tested without torch."""
