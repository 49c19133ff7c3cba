"""`python -m memlens` = the `memlens` command (harness/cli.py)."""

from memlens.harness.cli import main

main()
