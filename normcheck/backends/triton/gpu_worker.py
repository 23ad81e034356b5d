"""The triton-gpu backend's worker process: runs a user's ``@triton.jit`` kernel with real
Triton on torch's CUDA tensors -- in a process of its own, never in normcheck's.

A kernel file is Python: its module-level code runs as it is imported -- in the cpu path's
sandboxed loader, never here: this worker rebuilds the kernels from the file's text (below).
It is started as every Python process normcheck starts is (:mod:`normcheck.backends.
isolation`: ``python -I`` with only the interpreter's folders and normcheck on its import path,
in a private empty folder, with the allow-listed environment; by ``normcheck-launch``: in a PID
namespace that dies with normcheck, every capability dropped).  What it does not get is the cpu
workers' sandbox -- landlock's read roots and the seccomp allow-list -- because the CUDA driver
needs its device files, its ioctls and its memory mappings: on this path a kernel's launch
(its heuristics, Triton's compile) can read what the user running normcheck can read, but it
writes only its own scratch folder (HOME, TMPDIR, Triton's cache) and /dev (landlock, applied
by the launcher: ``Worker.writes_scratch``), and it never holds normcheck's environment
(tokens), its capabilities, its working folder or its process (DESIGN, "Threat model").  One
worker per user file, as on the cpu backend.

The arrays travel as on the cpu backend: the parent places them in the shared arena
(:meth:`normcheck.backends.cpu.workers.Worker.run_on_arrays`); here each is copied to the device
as torch's type of the same name, the kernel runs, and the outputs are copied back.

``NORMCHECK_TRITON_DEVICE=cpu`` is the stand-in a machine without a GPU tests this path with:
the same worker, the same protocol, Triton's own interpreter on torch's CPU tensors
(``TRITON_INTERPRET=1``) -- everything but the device.

The file's top level never runs here: it ran in a loader (the cpu path's, sandboxed), which
described what it left as data; the kernels are rebuilt from the file's text and those
descriptions (:func:`normcheck.backends.triton.extract.rebuild`), as on the cpu path.

Request::

    {"op": "launch", "module": cached path, "filename": the user's path, "entry": name,
     "params": [names], "grid": [x, y, z], "num_warps": n, "args": [records],
     "dtypes": [numpy dtype name | ""], "globals": the loader's description of the file}
"""

import ctypes
import os
import time

import numpy as np

from normcheck.backends.cpu import worker as base_worker

#: numpy dtype names whose torch dtype is named otherwise
_TORCH_NAMES = {"bool": "bool", "float8_e4m3fnuz": "float8_e4m3fnuz"}


def _device() -> str:
    return "cpu" if os.environ.get("NORMCHECK_TRITON_DEVICE") == "cpu" else "cuda"


def _prepare():
    import torch  # noqa: F401 -- the device's arrays
    import triton  # noqa: F401


def launch(req):
    import torch

    from normcheck.backends.triton import extract

    try:
        ns, config, _stood = extract.rebuilt(req)
        fn = ns[req["entry"]]
    except extract.Refused as e:
        return {"ok": False, "kind": "load", "message": f"refused: {e}"}
    except Exception as e:  # noqa: BLE001 -- the file's defs raised as they were made
        return {"ok": False, "kind": "load", "message": f"{type(e).__name__}: {str(e)[:600]}"}
    # an autotuned kernel runs its first config (its decorator is not rebuilt)
    extra = {k: v for k, v in (config or {}).items() if k not in req["params"]}
    dev = _device()
    maps, copies, call = [], [], []
    try:
        for i, rec in enumerate(req["args"]):
            if rec[0] == "array":
                _, offset, region, start, nbytes, itemsize = rec
                rbase = base_worker.map_guarded(offset, region)
                if not rbase:
                    return {"ok": False, "kind": "launch",
                            "message": f"could not map {nbytes} bytes for argument {i}"}
                g = base_worker.guard_bytes(region)
                maps.append((rbase - g, region + 2 * g))
                raw = (ctypes.c_char * max(nbytes, 1)).from_address(rbase + start)
                host = np.frombuffer(raw, np.uint8, count=nbytes)
                name = req["dtypes"][i]
                on_dev = torch.from_numpy(host.copy()).to(dev)
                copies.append((host, on_dev))
                call.append(on_dev.view(getattr(torch, _TORCH_NAMES.get(name, name))))
            elif rec[0] == "null":
                call.append(None)
            else:
                call.append(np.frombuffer(rec[2], np.dtype(rec[1]))[0].item())
        t0 = time.perf_counter()
        try:
            fn[tuple(req["grid"])](*call, num_warps=int(req["num_warps"]), **extra)
            if dev == "cuda":
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 -- the kernel's own error, named
            return {"ok": False, "kind": "error",
                    "message": f"{type(e).__name__}: {str(e)[:600]}"}
        seconds = time.perf_counter() - t0
        for host, on_dev in copies:
            host[:] = on_dev.cpu().numpy()
        return {"ok": True, "seconds": seconds}
    finally:
        del call, copies
        for b, length in maps:
            base_worker.unmap(b, length)


if __name__ == "__main__":
    base_worker.main({"launch": launch}, prepare=_prepare)
