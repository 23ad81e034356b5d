"""`python -m normcheck` is the `normcheck` command."""

import sys

from normcheck.cli import main

sys.exit(main())
