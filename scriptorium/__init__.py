"""The `scriptorium` command: one entry point for export, train, bench, study, app and serve.

Layer: above every other package; `scriptorium.cli` imports a subcommand's module only when that
subcommand runs, and nothing imports scriptorium/ (docs/DESIGN.md, "Layers").
"""
