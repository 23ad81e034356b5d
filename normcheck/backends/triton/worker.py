"""The Triton backend's worker process: runs a ``@triton.jit`` kernel under the executor, inside
the cpu backend's sandbox.

Started like the cpu backend's worker (by ``normcheck-launch``, with its limits, sharing an
arena with normcheck) and served by the same loop (:func:`normcheck.backends.cpu.worker.main`):
Triton, numpy and the executor are imported before the sandbox is entered; the user's file is
executed inside it (its text read from normcheck's cache, its lines named by the user's path).

Request::

    {"op": "launch", "module": cached path, "filename": the user's path, "entry": name,
     "params": [names], "constexprs": [names], "grid": [x, y, z], "args": [records as the cpu
     worker's], "dtypes": [numpy dtype name | ""], "names": [labels], "poison": [bits | -1],
     "schedule": "forward" | "reverse" | "random", "seed": s, "batched": programs together}

Reply: {"ok": True, "seconds": t, "note": the launch's note or ""} or {"ok": False, "kind": a FailureKind or "load",
"message": ...}.
"""

import ctypes
import time

import numpy as np

from normcheck.backends.cpu import worker as base_worker
from normcheck.backends.triton.opcall import where_raised



def _prepare():
    """Before the sandbox: Triton, numpy and the executor imported; the source lines of
    Triton's own language modules cached (the interpreter reads a @jit function's source, and
    in the sandbox a file's metadata cannot be read: entries without a modification time are
    never checked against the file)."""
    import importlib
    import linecache
    import os
    import sys

    import numpy.ma  # noqa: F401 -- imported lazily by the interpreter's reductions
    import triton.language.extra.cuda.libdevice  # noqa: F401 -- what the executor runs
    import triton.language.extra.libdevice  # noqa: F401 -- what a kernel file imports

    import tempfile

    from normcheck.backends.triton import executor

    # a file's imports ask for the temporary folder (torch's do, as it sets up its caches):
    # told the worker's own folder, which it may not write -- never a search that writes
    tempfile.tempdir = os.getcwd()
    # and look libraries up (cuda.pathfinder's find_library("dl"), as torch's CUDA build is
    # imported): from the loader's folders, never by running ldconfig or gcc (no process may
    # start in the sandbox)
    import ctypes.util

    ctypes.util.find_library = find_library

    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if name.startswith("triton.") and f and f.endswith(".py"):
            lines = linecache.getlines(f)
            linecache.cache[f] = (sum(map(len, lines)), None, lines, f)
    import inspect

    executor.install()
    inspect.getmodule(executor.tl.sum)  # its cache of every module's file, filled now
    _heap_for_batches()


#: glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _heap_for_batches():
    """A batch's temporaries (a few MiB each, dozens a batch) taken from the heap and kept there
    when freed: by default glibc maps a block that large afresh and unmaps it when freed, so
    each was faulted in page by page again -- a launch of 8191 rows of 4096 ran at 3,500
    rows/s, with these settings 7,500 (the same peak: the largest mapped block is 32 MiB, the
    free heap kept below 128 MiB).  Where the C library is not glibc nothing changes."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 128 << 20)


#: Where the dynamic loader finds the system's libraries (those normcheck-launch's worker reads)
_LIBRARY_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                 "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
                 "/usr/local/lib")


def find_library(name: str):
    """ctypes.util.find_library without a process: the soname of lib<name>.so.N in the loader's
    folders (what ``ldconfig -p`` would name), else None."""
    import os
    import re

    want = re.compile(rf"^lib{re.escape(name)}\.so\.(\d+)$")
    for d in _LIBRARY_DIRS:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        found = sorted((int(m.group(1)), n) for n in names if (m := want.match(n)))
        if found:
            return found[-1][1]
    return None


def describe(req):
    """The file run as a module (as ``import`` runs it), what it left described as data."""
    from normcheck.backends.triton import executor, extract

    text = base_worker.read_file(req["module"])
    try:
        ns = executor.load_module(text, req["filename"], "normcheck_user",
                                  stubs=req.get("stubs", ()), file=req["module"])
    except Exception as e:  # noqa: BLE001 -- the user's file raised as it ran
        return {"ok": False, "kind": "load",
                "message": f"{type(e).__name__}: {str(e)[:600]}{where_raised(e)}"}
    return {"ok": True, "globals": extract.describe(ns, req["filename"]),
            "stood_in": {str(k): str(v)[:400] for k, v in executor.STOOD_IN.items()}}


def _order(n, schedule, seed):
    if schedule == "reverse":
        return list(range(n - 1, -1, -1))
    if schedule == "random":
        return [int(i) for i in np.random.default_rng(seed).permutation(n)]
    return None


def launch(req):
    from normcheck.backends.triton import executor
    from normcheck.errors import KernelError, Unsupported

    from normcheck.backends.triton import extract

    try:
        ns, config, _stood = extract.rebuilt(req)
    except extract.Refused as e:
        return {"ok": False, "kind": "load", "message": f"refused: {e}"}
    except KeyError as e:
        return {"ok": False, "kind": "load", "message": str(e.args[0] if e.args else e)}
    except Exception as e:  # noqa: BLE001 -- the file's defs raised as they were made
        return {"ok": False, "kind": "load",
                "message": f"{type(e).__name__}: {str(e)[:600]}{where_raised(e)}"}
    try:
        fn, meta = executor.kernel_function(ns, req["entry"], config)
    except (KeyError, TypeError) as e:
        return {"ok": False, "kind": "load", "message": f"{req['entry']}: {e}"}
    maps, args = [], []
    constexprs = set(req["constexprs"])
    wide = set(req.get("wide", ()))  # a large-index run's arrays: 2^31 elements of margin below
    windows = req.get("windows") or {}  # their first materialised element, by argument
    try:
        for i, rec in enumerate(req["args"]):
            if rec[0] == "array":
                _, offset, region, start, nbytes, itemsize = rec
                below = base_worker.wide_margin(itemsize) if offset in wide else 0
                rbase = base_worker.map_guarded(offset, region, below)
                if not rbase:
                    return {"ok": False, "kind": "launch",
                            "message": f"could not map {nbytes} bytes for argument {i}"}
                g = base_worker.guard_bytes(region)
                maps.append((rbase - (below or g), region + (below or g) + g))
                raw = (ctypes.c_char * max(nbytes, 1)).from_address(rbase + start)
                arr = np.frombuffer(raw, np.uint8, count=nbytes)
                arr = arr.view(np.dtype(_dtype(req["dtypes"][i])))
                if str(i) in windows:  # only its last rows exist: tracked from there
                    base, walk = windows[str(i)]
                    arr = executor.Window(arr, int(base), bool(walk))
                args.append(arr)
            elif rec[0] == "null":
                args.append(None)
            else:
                v = np.frombuffer(rec[2], np.dtype(rec[1]))[0]
                args.append(v.item() if req["params"][i] in constexprs else v)
        poison = {i: int(p) for i, p in enumerate(req["poison"]) if int(p) >= 0}
        g = req["grid"]
        n = g[0] * g[1] * g[2]
        order = _order(n, req["schedule"], req["seed"])
        sub = req.get("blocks")  # [mask, value]: only the programs whose index has those bits
        if sub:
            mask, value = int(sub[0]), int(sub[1])
            order = [p for p in (range(n) if order is None else order) if p & mask == value]
        t0 = time.perf_counter()
        try:
            note = executor.run(fn, meta, req["params"], constexprs, g, args, req["names"],
                                poison, order, batched=bool(req.get("batched", True)))
        except KernelError as e:
            return {"ok": False, "kind": str(e.kind), "message": str(e)}
        except Unsupported as e:  # a construct normcheck cannot run: no verdict
            return {"ok": False, "kind": "unsupported", "message": str(e)}
        stored = {}
        if req.get("stored"):  # which elements a program stored, packed a bit each
            for i, mask in executor.STORED.items():
                packed = np.packbits(mask).tobytes()
                if len(packed) <= (1 << 15):
                    stored[str(i)] = packed
        stood_in = req.get("stood_in") or {}
        if stood_in:  # said with every launch: the check keeps each note once
            note = "; ".join(filter(None, [note, "installed but not importable here, so stood "
                                           "in for as a module not installed is: " + ", ".join(
                                               f"{k} ({str(v)[:160]})"
                                               for k, v in stood_in.items())]))
        rep = {"ok": True, "seconds": time.perf_counter() - t0, "note": note or ""}
        if req.get("stored"):
            rep["stored"] = stored
        return rep
    finally:
        del args
        for base, length in maps:
            base_worker.unmap(base, length)


def _dtype(name):
    import ml_dtypes

    return getattr(ml_dtypes, name) if name.startswith(("bfloat16", "float8_")) else name


if __name__ == "__main__":
    from normcheck.backends.triton import opcall

    base_worker.main({"launch": launch, "describe": describe, "op_load": opcall.load,
                      "op_call": opcall.call}, prepare=_prepare, stat_paths=True)
