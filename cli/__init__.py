"""Command-line tools: tileops-db (the tuning database), tileops-tune and tileops-bench."""
