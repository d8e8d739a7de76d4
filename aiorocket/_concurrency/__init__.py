"""Small concurrency kit: periodic runners, backoff, bounded cleanup."""
