"""`python -m kmod check ...` (see kmod.cli)."""

import sys

from kmod.cli import main

sys.exit(main())
