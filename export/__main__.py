"""`python -m export MODEL_DIR OUT_DIR …`: the same as `scriptorium export`."""

from .cli import main

raise SystemExit(main())
