"""`python -m normcheck` is the `normcheck` command.

Python puts the folder it was started in first on the import path under ``-m``: a ``ctypes.py``
or a ``numpy/`` there (a pull request under review) would be imported in place of the real one
by the first line of normcheck that needs it.  That folder is taken off the path before anything
else is imported (normcheck itself is imported already, and its own modules are found through
its package, not the path), so ``python -m normcheck`` and ``normcheck`` import the same modules.
A ``normcheck/`` planted there is the one thing this cannot undo: Python runs it as the module
``-m`` names, before this file exists for it (DESIGN, "Threat model").
"""

import os
import sys

_here = os.getcwd()
sys.path[:] = [p for p in sys.path if p not in ("", ".", _here)]

from normcheck.cli import main  # noqa: E402 -- after the path is mended

sys.exit(main())
