"""Layer 1 of harness/ (the bottom): what every other layer and the recipes rest on, with no model and no
metric in it — errors (exit codes), io (atomic writes, the append-only row store), layout (a run on disk),
config (strict config sections), provenance, stats (intervals and exact tests), shipped (conf/ and assets/),
lock (one writer per directory), console (what reaches the terminal), user_data (the user's example files).
Imports nothing from harness above it."""
