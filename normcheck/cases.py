"""The counterexample file: a failing case saved so that a person can run it again
(:mod:`normcheck.replay` runs it).

A case file (.npz) holds data, never code to run: the rows, γ, β, the residual and ε as the bits
of their storage format, and a description of what ran them -- a built-in variant, or a user
kernel by the *path* of its source and spec and the SHA-256 of their content at the time.
``normcheck replay FILE`` compiles the source on disk (and says so when it has changed since);
a case saved from a kernel given as text carries that text, and it runs only behind
``--run-embedded-source``, which says what it does: compile and run C++ from the file.

Files are written under a name no other run uses (``.normcheck/counterexample-<kernel>-<time>-
<pid>.npz``, created exclusively), so concurrent checks never overwrite each other's.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np

from normcheck import formats
from normcheck.errors import NormcheckError, invalid

__all__ = ["save_case", "load_case", "command", "bad_case", "EMBEDDED_FLAG", "CASE_LIMITS",
           "WORK_FOLDER", "work_folder", "clean", "KEEP"]

#: The folder a check writes into in the current directory: its counterexamples and Hypothesis's
#: files, with a .gitignore of its own (nothing in it belongs in a repository).
WORK_FOLDER = Path(".normcheck")
#: The counterexamples kept there (the oldest go first).
KEEP = 50


def work_folder() -> Path:
    """The working folder, made with its .gitignore (``*``) where missing."""
    WORK_FOLDER.mkdir(parents=True, exist_ok=True)
    ign = WORK_FOLDER / ".gitignore"
    if not ign.exists():
        try:
            ign.write_text("# normcheck's counterexamples and search files: not for the repository\n*\n")
        except OSError:
            pass
    return WORK_FOLDER


def _prune(folder: Path, keep: int = KEEP):
    """Keep the newest ``keep`` counterexamples of the working folder."""
    try:
        files = sorted(folder.glob("counterexample-*.npz"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for p in files[:max(0, len(files) - keep)]:
        try:
            p.unlink()
        except OSError:
            pass


def clean() -> tuple[int, int]:
    """Remove the working folder of the current directory: (files, bytes) removed."""
    import shutil

    if not WORK_FOLDER.is_dir() or WORK_FOLDER.is_symlink():
        return 0, 0
    n = size = 0
    for p in WORK_FOLDER.rglob("*"):
        if p.is_file() and not p.is_symlink():
            n += 1
            size += p.stat().st_size
    shutil.rmtree(WORK_FOLDER)
    return n, size

EMBEDDED_FLAG = "--run-embedded-source"
_ARRAYS = ("x", "gamma", "beta", "residual", "dy", "mean", "rstd", "scale", "dh", "y")


def _slug(s):
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(s))[:60] or "kernel"


def _store(a):
    fmt = formats.of_dtype(a.dtype)
    return a.view(fmt.uint), fmt.name


def save_case(path=None, *, kernel: dict, x, gamma=None, beta=None, residual=None,
              eps=np.float32(1e-5), note: str = "", label=None, exclusive=True, **extra) -> Path:
    """Write a case file; ``kernel`` describes what ran (e.g. {"variant": name} or
    {"source": ..., "sha256": ..., "entries": [...], "norm": ..., "dtype": ..., "spec": ...}).
    Without ``path`` the file goes to .normcheck/ under a name of its own."""
    default = path is None
    if default:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = work_folder() / f"counterexample-{_slug(label or 'kernel')}-{stamp}-" \
                               f"{os.getpid()}.npz"
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays, kinds = {}, {}
    for name, a in (("x", x), ("gamma", gamma), ("beta", beta), ("residual", residual),
                    *extra.items()):
        if a is not None:
            bits, fmt = _store(np.ascontiguousarray(a))
            arrays[name] = bits
            kinds[name] = fmt
    meta = {"kernel": kernel, "formats": kinds, "eps": float(np.float32(eps)), "note": note,
            "version": 2}
    if exclusive:
        n = 0
        while True:
            cand = path if n == 0 else path.with_name(f"{path.stem}-{n}.npz")
            try:
                fd = os.open(cand, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                n += 1
        path = cand
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, meta=np.array(json.dumps(meta)), **arrays)
    else:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez_compressed(f, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(tmp, path)
    if default:
        _prune(path.parent)
    return path


def bad_case(path, why):
    """The error for a case file that is not one normcheck wrote (``why`` says what is wrong)."""
    return invalid("case", str(path), "a case file written by normcheck (.npz)",
                   f"{why}; save it again with normcheck check --save-counterexample")


#: What a case file may hold: its size, each array's elements, its metadata's bytes and depth.
#: ``elements`` bounds all the arrays together as well as each (#65: a 0.33 MB file of 16
#: members expanding to 2^24 elements each made normcheck's own process peak at 1.5 GB; a
#: case normcheck saves holds a few rows -- a family's case is at most ~2.6e5 elements).
CASE_LIMITS = {"file_bytes": 64 << 20, "elements": 1 << 22, "meta_bytes": 1 << 16,
               "meta_depth": 8, "members": 16}
_MEMBER = re.compile(r"^[a-z_]{1,16}\.npy$")


def _read_npz(path: Path) -> tuple[dict, dict]:
    """(metadata, {name: array}) of a case file, read as hostile data: the file's size, each
    member's name and declared size, each array's header (dtype and shape, checked before any
    byte of data is read), and the metadata's size and depth are checked against CASE_LIMITS;
    no pickle, no object array."""
    from normcheck.files import read_limited

    raw = read_limited(path, "case", CASE_LIMITS["file_bytes"],
                       "a case file written by normcheck (.npz)")
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, ValueError, EOFError) as e:
        raise bad_case(path, f"it is not a zip archive ({e})") from None
    infos = zf.infolist()
    if len(infos) > CASE_LIMITS["members"]:
        raise bad_case(path, f"it has {len(infos)} members")
    meta, arrays, total = None, {}, 0
    for info in infos:
        if not _MEMBER.match(info.filename):
            raise bad_case(path, f"it holds {info.filename[:40]!r}, which a case file does not")
        name = info.filename[:-4]
        if info.file_size > 8 * CASE_LIMITS["elements"] + 4096:
            raise bad_case(path, f"its member {name!r} declares {info.file_size} bytes")
        try:
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"npy version {version}")
                if dtype.hasobject or fortran:
                    raise ValueError("an object or Fortran-ordered array")
                count = int(np.prod(shape, dtype=np.int64)) if shape else 1
                total += max(count, 0)
                if len(shape) > 2 or count < 0 or total > CASE_LIMITS["elements"]:
                    raise ValueError(f"an array of shape {shape} (the arrays of a case hold at "
                                     f"most {CASE_LIMITS['elements']:,} elements in all)")
                if name == "meta":
                    if dtype.kind != "U" or shape != () or \
                            dtype.itemsize > 4 * CASE_LIMITS["meta_bytes"]:
                        raise ValueError("metadata that is not one short string")
                elif dtype not in (np.dtype(np.uint16), np.dtype(np.uint32)):
                    raise ValueError(f"an array of {dtype}, not the bits of fp16/bf16/fp32")
                data = f.read(count * dtype.itemsize + 1)
                if len(data) != count * dtype.itemsize:
                    raise ValueError(f"{len(data)} bytes of data for {count} elements")
                a = np.frombuffer(data, dtype=dtype, count=count).reshape(shape).copy()
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error,
                RuntimeError) as e:
            raise bad_case(path, f"its member {name!r} cannot be read ({e})") from None
        if name == "meta":
            meta = str(a[()])
        else:
            arrays[name] = a
    if meta is None:
        raise bad_case(path, "it has no metadata")
    if _json_depth(meta) > CASE_LIMITS["meta_depth"]:
        raise bad_case(path, f"its metadata nests more than {CASE_LIMITS['meta_depth']} deep")
    try:
        return json.loads(meta), arrays
    except (json.JSONDecodeError, RecursionError) as e:
        raise bad_case(path, f"its metadata is not JSON ({type(e).__name__})") from None


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings of a JSON text, without recursion."""
    depth = top = 0
    in_str = esc = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            top = max(top, depth)
        elif c in "]}":
            depth -= 1
    return top


def _str(v):
    return isinstance(v, str) and len(v) <= 4096


#: The keys of a case file's kernel description and what each must be.
_KERNEL_KEYS = {
    "variant": _str, "source": _str, "sha256": _str, "source_text": lambda v: isinstance(v, str),
    "entries": lambda v: isinstance(v, list) and 0 < len(v) <= 64 and all(map(_str, v)),
    "entry": _str, "norm": _str, "reference": lambda v: v is None or _str(v), "dtype": _str,
    "out_dtype": lambda v: v is None or _str(v),
    "defines": lambda v: v is None or (isinstance(v, dict) and len(v) <= 64 and all(
        _str(k) and (x is None or isinstance(x, (str, int, float))) for k, x in v.items())),
    "spec": lambda v: v is None or _str(v), "spec_sha256": lambda v: v is None or _str(v),
    "block": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "callable": _str, "arch": lambda v: v is None or (isinstance(v, (int, str)) and
                                                      not isinstance(v, bool)),
    "backward": lambda v: isinstance(v, dict) and set(v) <= {"stats", "mode"} and
    v.get("stats") in ("saved", "recomputed") and v.get("mode") in ("x", "y"),
    "dtypes": lambda v: v is None or (isinstance(v, dict) and len(v) <= 32 and all(
        _str(k) and _str(x) for k, x in v.items())),
    "include": lambda v: isinstance(v, list) and len(v) <= 64 and all(map(_str, v)),
    "op": lambda v: isinstance(v, dict) and set(v) <= {"call", "module", "root", "output", "h"}
    and all(x is None or _str(x) or (isinstance(x, int) and not isinstance(x, bool))
            for x in v.values()),
    "quant": lambda v: isinstance(v, dict) and len(v) <= 32 and all(
        _str(k) and (x is None or isinstance(x, (str, int, float, list))) for k, x in v.items()),
}


def _check_kernel(k: dict, path):
    """A case file's kernel description, checked key by key (its values reach the compiler:
    the entries and defines are checked again by their own grammars when used)."""
    for key, ok in ((k_, _KERNEL_KEYS.get(k_)) for k_ in k):
        if ok is None or not ok(k[key]):
            raise bad_case(path, f"its kernel description has a bad {key[:40]!r}")
    if "variant" not in k and "callable" not in k and not ("norm" in k and "dtype" in k):
        raise bad_case(path, "its kernel description names no norm and dtype")


def load_case(path) -> dict:
    """Read a case file: {"kernel", "x", "gamma", "beta", "residual", "eps", "note", ...}; a
    missing, truncated, corrupt or hostile file is an InvalidArgument naming it (see
    :func:`_read_npz` for what is checked)."""
    path = Path(path)
    if path.is_dir():
        raise invalid("case", str(path), "a case file, not a folder")
    if not path.exists():
        raise invalid("case", str(path), "an existing case file", "check the path")
    meta, arrays = _read_npz(path)
    if not isinstance(meta, dict) or not isinstance(meta.get("kernel"), dict) or \
            not isinstance(meta.get("formats"), dict) or "x" not in meta["formats"]:
        raise bad_case(path, "its metadata is incomplete")
    _check_kernel(meta["kernel"], path)
    if not all(isinstance(k, str) and isinstance(v, str) and v in formats.FORMATS
               for k, v in meta["formats"].items()):
        raise bad_case(path, "its formats are not fp32, fp16 or bf16")
    for name in ("scale",):
        if name in meta["formats"] and meta["formats"][name] != "fp32":
            raise bad_case(path, f"its {name} is not float32")
    try:
        out = {"kernel": meta["kernel"], "eps": np.float32(meta["eps"]),
               "note": str(meta.get("note", ""))}
        for name in _ARRAYS:
            if name in meta["formats"]:
                if name not in arrays:
                    raise bad_case(path, f"the array {name!r} is missing")
                fmt = formats.get(meta["formats"][name])
                a = arrays[name]
                if a.dtype != fmt.uint:
                    raise bad_case(path, f"the array {name!r} is not {fmt.name} bits")
                out[name] = a.view(fmt.dtype)
            else:
                out[name] = None
    except NormcheckError:
        raise
    except (TypeError, ValueError) as e:
        raise bad_case(path, f"its metadata is malformed ({e})") from None
    x = out["x"]
    if x.ndim != 2 or x.size == 0:
        raise bad_case(path, f"x has shape {x.shape}, not [rows, cols]")
    for name in ("gamma", "beta"):
        if out[name] is not None and out[name].shape != (x.shape[1],):
            raise bad_case(path, f"{name} has shape {out[name].shape}, not ({x.shape[1]},)")
    for name in ("residual", "dy", "dh", "y"):
        if out[name] is not None and out[name].shape != x.shape:
            raise bad_case(path, f"{name} has shape {out[name].shape}, not {x.shape}")
    return out


def command(path) -> str:
    return f"normcheck replay {path}"
