"""Layer 2 of harness/: text without a model — FIM formats and stop tokens per model family (fim), the
sliding-window normalized edit distance (distance, with its compiled kernel) and the exclusion rules that
decide which targets can be scored at all (exclusions). No torch. Imports only memlens.harness.core."""
