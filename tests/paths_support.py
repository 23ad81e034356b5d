"""Test helpers for specs written beside their kernels."""

import re
import shutil
from pathlib import Path

def beside(folder, src) -> str:
    """Copy the kernel file ``src`` (and the headers it includes by a quoted name) into
    ``folder`` and return its name, for a spec written there: a spec names only files beneath
    its own folder (normcheck.spec.load)."""
    src = Path(src)
    shutil.copy(src, Path(folder) / src.name)
    for inc in re.findall(r'^#include "([^"/]+)"', src.read_text(), re.M):
        if (src.parent / inc).is_file():
            shutil.copy(src.parent / inc, Path(folder) / inc)
    return src.name
