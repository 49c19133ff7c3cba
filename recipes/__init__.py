"""memlens recipes: one training stage per module, linked only through directories."""
