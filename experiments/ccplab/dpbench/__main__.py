"""``python -m ccplab.dpbench`` (see the package doc)."""

import sys

from .cli import main

sys.exit(main())
