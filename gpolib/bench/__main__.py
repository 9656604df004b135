"""`python -m gpolib.bench ...`: the RL-step benchmark (see `gpolib.bench`)."""
import sys

from . import main

sys.exit(main())
