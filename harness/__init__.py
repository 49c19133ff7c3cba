"""memlens harness: everything that measures memorization. The only place a metric is defined."""
