"""`python -m train <recipe> …`: the same as `scriptorium train <recipe> …` (train/cli.py)."""

import sys

from train.cli import main

sys.exit(main())
