"""The `scriptorium` command: one entry point for export, train, bench and app."""
