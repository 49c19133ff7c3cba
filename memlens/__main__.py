"""`python -m harness` = the `memaudit` command (harness/cli.py)."""

from harness.cli import main

main()
