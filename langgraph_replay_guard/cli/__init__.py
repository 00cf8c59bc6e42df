"""The `replay-guard` command line."""
