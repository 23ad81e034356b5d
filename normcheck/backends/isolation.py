"""How every Python process normcheck starts begins: isolated from the folder normcheck runs in.

A worker (the cpu backend's, the Triton executor's, the Triton GPU runner) and the header fetch
(pip) are Python programs.  Started as ``python -m MODULE`` in the user's folder, Python puts
that folder first on the import path -- so a ``ctypes.py``, a ``numpy/`` or a ``normcheck/``
planted beside a kernel (a pull request under review) would run, unconfined, before the
program's first line.  Every one is started as :func:`command` builds it instead:

* ``python -I -B -c BOOT``: isolated mode -- no current folder or script folder on the path,
  no ``PYTHON*`` variable (PYTHONPATH, PYTHONSTARTUP ...), no user site-packages; no bytecode
  written;
* the bootstrap (:data:`BOOT`, nothing but builtins until it is done) keeps on the import path
  only the interpreter's own folders (its prefixes: the standard library and the environment's
  site-packages) and puts first a private folder holding one entry, a link named ``normcheck``
  to the package that started it -- never the folder above the package (an editable install's
  checkout, with whatever a pull request added there) -- then runs the module;
* in a private, empty working folder (:func:`private_cwd`), with the allow-listed environment
  (:func:`normcheck.backends.confine.child_environment`).

:func:`foreign_modules` is the assertion a worker makes before it enters its sandbox: every
module imported so far comes from those folders.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["BOOT", "command", "import_root", "private_cwd", "allowed_roots", "foreign_modules",
           "PACKAGE", "CUDA_SRC", "is_own"]

#: The normcheck package folder (the real one, links resolved).
PACKAGE = Path(__file__).resolve().parent.parent


def _cuda_src() -> Path:
    for d in (PACKAGE / "cuda_src", PACKAGE.parent / "cuda_src"):
        if (d / "norm_common.cuh").is_file():
            return d
    raise FileNotFoundError(f"normcheck's built-in kernels (cuda_src) are missing from "
                            f"{PACKAGE}: reinstall normcheck")


#: normcheck's built-in kernels: normcheck/cuda_src in an installed wheel, cuda_src/ at the top
#: of a checkout (an editable install).
CUDA_SRC = _cuda_src()


def is_own(path) -> bool:
    """Whether ``path`` is one of normcheck's own files (its package, its built-in kernels):
    run where no user code has run (DESIGN, "Threat model")."""
    p = Path(path).resolve()
    return p.is_relative_to(PACKAGE) or p.is_relative_to(CUDA_SRC)

#: Run by ``python -I -B -c``: argv[1] the private import folder ("-": none), argv[2] the
#: module, the rest its arguments.  The standard library's modules imported before this runs (os, site, codecs
#: ...) came from the interpreter's folders: -I put nothing else on the path.
BOOT = """\
import sys
root, module = sys.argv[1], sys.argv[2]
homes = tuple(sorted({p.rstrip("/") + "/" for p in (sys.prefix, sys.base_prefix,
                                                      sys.exec_prefix, sys.base_exec_prefix)}))
sys.path[:] = [root] * (root != "-") + [p for p in sys.path
                                        if p and (p.rstrip("/") + "/").startswith(homes)]
sys.argv = [module] + sys.argv[3:]
import runpy
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


_ROOT: list = []


def import_root() -> Path:
    """The private import folder: a folder of this process's own, made fresh (``mkdtemp``: a
    random name, mode 0700, created exclusively) beneath ``<cache>/python/`` and holding only
    a link ``normcheck`` to :data:`PACKAGE`; removed as the process ends (one a killed
    process left is removed by the next).  Never a folder that already existed: whoever can
    write the cache (a restored CI cache) could have planted a ``struct.py`` in it, imported
    before any sandbox (#65)."""
    if _ROOT and (_ROOT[0] / "normcheck").is_symlink():
        return _ROOT[0]
    import atexit
    import shutil
    import tempfile

    from normcheck.backends import cache

    base = cache.cache_root() / "python"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    _sweep(base)
    root = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=base))
    os.symlink(PACKAGE, root / "normcheck")
    _ROOT[:] = [root]
    atexit.register(shutil.rmtree, root, True)
    return root


def orphaned(pid: int) -> bool:
    """Whether the process ``pid`` that named a folder is gone (one that lives, or that this
    process may not ask about, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def _sweep(base: Path) -> None:
    """Remove what ``base`` holds but the folders of normcheck processes still alive: a
    killed process's import folder, and anything else (never imported from)."""
    import re
    import shutil

    for e in list(base.iterdir()):
        m = re.match(r"^run-(\d+)-", e.name)
        if m and e.is_dir() and not e.is_symlink() and not orphaned(int(m.group(1))):
            continue  # its owner lives
        if e.is_dir() and not e.is_symlink():
            shutil.rmtree(e, ignore_errors=True)
        else:
            try:
                e.unlink()
            except OSError:
                pass


def private_cwd() -> str:
    """An empty folder of normcheck's own, the working folder of what it starts:
    ``<cache>/empty``, made read-only (nothing normcheck starts writes into its working
    folder; a confined process could not)."""
    from normcheck.backends import cache

    d = cache.cache_root() / "empty"
    if not d.is_dir():
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o500)
    return str(d)


def command(module: str, *args, normcheck: bool = True) -> list:
    """The argv of a Python process running ``module`` isolated (see the module docstring);
    ``normcheck=False``: a program of the interpreter's own (pip), without normcheck on its
    path."""
    root = str(import_root()) if normcheck else "-"
    return [sys.executable, "-I", "-B", "-c", BOOT, root, module, *[str(a) for a in args]]


def allowed_roots() -> tuple:
    """The folders a normcheck Python process imports from, links resolved: the interpreter's
    prefixes (the standard library, the environment's site-packages) and normcheck's own
    package."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(PACKAGE)}
    return tuple(sorted({os.path.realpath(r).rstrip("/") + "/" for r in roots if r}))


def foreign_modules() -> list:
    """[(name, file)] of the imported modules whose file (links resolved) lies outside
    :func:`allowed_roots`: what a worker refuses to go on with."""
    roots = allowed_roots()
    out = []
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        # a module's file is absolute where it came from a folder of the path (-I put no
        # relative one there); a name such as torch.ops's "_ops.py" is no file of the path
        if isinstance(f, str) and os.path.isabs(f) and \
                not os.path.realpath(f).startswith(roots):
            out.append((name, f))
    return out
