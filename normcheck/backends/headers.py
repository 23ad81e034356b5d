"""The headers a file from a project includes beside its kernels: CUDA's libraries (cuBLAS,
cuRAND, cuSPARSE, cuDNN, NVTX ...) and PyTorch's (torch, ATen, c10).

A norm kernel's file is rarely only its kernels: the host code beside them includes
``cublas_v2.h`` or ``torch/all.h`` and names their types, though no kernel calls into them.  The
cpu backend compiles the whole file, so those headers must be found:

* **CUDA's library headers** come from, in order: the nvidia-* wheels installed beside normcheck
  (``pip install nvidia-cublas`` ...: their headers land in the same ``nvidia/cu13/include``
  the CUDA runtime's do), headers normcheck fetched before (:func:`fetch`: the package's wheel
  is downloaded with pip, only its ``include`` folder is kept in the build cache -- 0.2 to
  2 MB a library, where the wheels are 77-517 MB), and a CUDA toolkit's (``$CUDA_HOME/include``,
  searched last).  A file that includes one that is missing fetches it (once a machine; say
  ``NORMCHECK_FETCH_HEADERS=0`` to be asked instead: the error then names the command).
* **PyTorch's** come from the torch installed beside normcheck, found without importing it; the
  headers only CUDA builds of torch generate are supplied by the shim (``shim/torch_cuda``).  A
  file that includes them where torch is not installed is an error naming the package.

Calls into those libraries from code a kernel reaches are named failures at run time (the cpu
backend links none of them: normcheck.backends.cpu.backend stubs their symbols).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from normcheck.backends import cache
from normcheck.errors import CompileError

__all__ = ["LIBRARIES", "SHIPPED_BY", "missing_hint", "library_for", "library_include_dirs",
           "torch_include_dirs", "python_include_dirs", "torch_cxx_standard", "fetch",
           "fetched", "missing_header", "TORCH_HEADERS", "frameworks"]

#: pip package of each CUDA library, the headers that name it, and what it is.
LIBRARIES = {
    "nvidia-cublas": (("cublas_v2.h", "cublas.h", "cublas_api.h", "cublasLt.h",
                       "cublasXt.h"), "cuBLAS"),
    "nvidia-curand": (("curand.h", "curand_kernel.h", "curand_philox4x32_x.h"), "cuRAND"),
    "nvidia-cusparse": (("cusparse.h", "cusparse_v2.h"), "cuSPARSE"),
    "nvidia-cudnn-cu13": (("cudnn.h", "cudnn_version.h", "cudnn_backend.h"), "cuDNN"),
    "nvidia-nvtx": (("nvToolsExt.h", "nvtx3/nvToolsExt.h", "nvToolsExtCuda.h",
                     "nvtx3/nvToolsExtCudaRt.h", "nvToolsExtCudaRt.h"), "NVTX"),
    "nvidia-cufft": (("cufft.h", "cufftXt.h"), "cuFFT"),
    "nvidia-cusolver": (("cusolverDn.h", "cusolver_common.h"), "cuSOLVER"),
}
#: The first path component of an include that is PyTorch's.
TORCH_HEADERS = ("torch/", "ATen/", "c10/", "caffe2/", "pybind11/", "Python.h")
SHIM_TORCH = Path(__file__).resolve().parent / "cpu" / "shim" / "torch_cuda"


def library_for(header: str) -> str | None:
    """The pip package whose headers hold ``header`` (a name as #included), or None."""
    h = header.strip().lstrip("./")
    for pkg, (names, _what) in LIBRARIES.items():
        if h in names or h.split("/")[-1] in names or h.startswith("nvtx3/") and \
                pkg == "nvidia-nvtx":
            return pkg
    return None


def _fetched_root() -> Path:
    return cache.cache_root() / "headers"


def fetched() -> dict:
    """{package: its include folder} of the headers fetched into the cache, each verified
    against the manifest the ledger recorded as it was fetched (:func:`_tree_verified`): a
    folder whose files changed is removed with a warning naming them, and fetched again where
    a build asks for it."""
    root = _fetched_root()
    out = {}
    if root.is_dir():
        for d in sorted(root.iterdir()):
            inc = d / "include"
            if inc.is_dir() and _tree_verified(d):
                out[d.name.split("@")[0]] = inc
    return out


def _manifest(folder: Path) -> dict:
    """{relative path: sha256} of every file under ``folder``."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


_TREES: dict = {}  # folder -> verified in this process


def record_tree(d: Path) -> None:
    """Record in the ledger (which no worker reads or writes) the manifest a fetched folder is
    verified against on every later use."""
    import json

    cache.write_ledger(d, json.dumps(_manifest(d / "include")))
    _TREES[str(d.resolve())] = True


def _tree_verified(d: Path) -> bool:
    """Whether a fetched folder holds exactly the files the ledger's manifest says it was
    fetched with (once a process); else it is removed, with a warning naming the files changed,
    added or gone -- a header planted in the cache would otherwise enter every build."""
    import json
    import sys

    key = str(d.resolve())
    if key in _TREES:
        return _TREES[key]
    try:
        recorded = json.loads(cache.read_ledger(d) or "null")
    except ValueError:
        recorded = None
    now = _manifest(d / "include")
    ok = recorded == now
    if not ok:
        if recorded is None:
            why = "has no manifest in the ledger (fetched by an older normcheck, or not by it)"
        else:
            diff = sorted(k for k in set(now) | set(recorded) if now.get(k) != recorded.get(k))
            why = (f"changed since it was fetched ({len(diff)} file(s): "
                   f"{', '.join(diff[:3])}{' ...' if len(diff) > 3 else ''})")
        print(f"normcheck: warning: the fetched headers {d} {why}: removed, fetched again "
              "where a build needs them", file=sys.stderr)
        shutil.rmtree(d, ignore_errors=True)
    _TREES[key] = ok
    return ok


def library_include_dirs() -> list[Path]:
    """The folders searched for CUDA's library headers after the CUDA runtime's own: the
    fetched ones, then ``$CUDA_HOME/include`` (or ``$CUDA_PATH``)."""
    out = list(fetched().values())
    for env in ("CUDA_HOME", "CUDA_PATH"):
        v = os.environ.get(env)
        if v and (Path(v) / "include").is_dir():
            out.append(Path(v) / "include")
    return out


def torch_include_dirs() -> list[Path]:
    """PyTorch's include folders (the torch installed beside normcheck, not imported), the
    shim's headers of CUDA builds after them; [] where torch is not installed."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin:
        return []
    inc = Path(spec.origin).parent / "include"
    if not (inc / "torch").is_dir():
        return []
    return [inc, inc / "torch" / "csrc" / "api" / "include", SHIM_TORCH] + python_include_dirs()


def python_include_dirs() -> list[Path]:
    """The running Python's headers (Python.h), where it has them: torch's extension builds
    search them (torch.utils.cpp_extension), and a torch extension's sources include pybind11
    (shipped in torch's include folder), which includes Python.h; [] where they are absent."""
    import sysconfig

    d = sysconfig.get_paths().get("include")
    return [Path(d)] if d and (Path(d) / "Python.h").is_file() else []


#: The C++ standards a header may demand with ``#if __cplusplus < N`` / ``#error``, newest first.
_STANDARDS = ((202302, "c++23"), (202002, "c++20"), (201703, "c++17"))
_CPLUSPLUS_FLOOR = re.compile(r"__cplusplus\s*<\s*(\d{6})L")


def torch_cxx_standard() -> str:
    """The C++ standard the installed torch's headers demand (what torch's own extension builds
    pass): torch 2.14's ``ATen/ATen.h`` stops with ``#error C++20 or later compatible compiler
    is required`` below C++20, earlier releases below C++17.  Read from that guard, so a later
    torch that raises the floor again is followed without a change here."""
    dirs = torch_include_dirs()
    floor = 201703
    if dirs:
        try:
            text = (dirs[0] / "ATen" / "ATen.h").read_text(errors="replace")[:4096]
        except OSError:
            text = ""
        for m in _CPLUSPLUS_FLOOR.finditer(text):
            floor = max(floor, int(m.group(1)))
    return next(name for v, name in _STANDARDS if v <= floor)


def torch_version() -> str | None:
    """The installed torch's version (from its metadata; torch is not imported)."""
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:
        return None


def frameworks(paths) -> dict:
    """{what: where it came from} of the framework and library headers among ``paths`` (the
    files a build read): PyTorch's with the installed version, each CUDA library's with its
    folder -- what a check's provenance states."""
    out = {}
    tdirs = torch_include_dirs()
    libs = {str(d): pkg for pkg, d in fetched().items()}
    names = {n: (pkg, what) for pkg, (ns, what) in LIBRARIES.items() for n in ns}
    for p in paths:
        if tdirs and p.startswith(str(tdirs[0]) + "/") and "torch" not in out:
            out["torch"] = f"{torch_version() or '?'} ({tdirs[0]})"
        elif p.startswith(str(SHIM_TORCH) + "/"):
            out.setdefault("torch_cuda_shim", str(SHIM_TORCH))
        for folder, pkg in libs.items():
            if p.startswith(folder + "/"):
                out.setdefault(LIBRARIES[pkg][1], f"{Path(folder).parent.name} (fetched, "
                                                  f"{folder})")
        base_name = p.rsplit("/", 1)[-1]
        if base_name in names and names[base_name][1] not in out:
            out[names[base_name][1]] = str(Path(p).parent)
    return out


_MISSING = re.compile(r"fatal error: ([^\s:]+): No such file or directory")


#: Headers of third-party libraries a kernel file may include, the registry package that ships
#: them and the folder of that package to give with -I (where one does).
SHIPPED_BY = {
    "cutlass/": ("nvidia-cutlass", "cutlass_library/source/include"),
    "cute/": ("nvidia-cutlass", "cutlass_library/source/include"),
    "flashinfer/": ("flashinfer-python", "flashinfer/data/include"),
    "pybind11/": ("pybind11", "pybind11/include"),
}


def missing_hint(header: str) -> str:
    """The header on no include path and its fix ("X, which is ...: give -I DIR"), with the
    registry package shipping it where there is one."""
    fix = (f"{header}, which is on no include path normcheck searches: give the folder "
           "holding it with -I DIR (include = [\"DIR\"] in a spec)")
    for prefix, (pkg, folder) in SHIPPED_BY.items():
        if header.startswith(prefix):
            return fix + (f"; the {pkg} package ships it (pip download --no-deps {pkg}, "
                          f"then -I <its files>/{folder})")
    return fix


def missing_header(diagnostics: str) -> str | None:
    """The header a failed preprocessing could not find, or None."""
    m = _MISSING.search(diagnostics or "")
    return m.group(1) if m else None


#: The wheel of each library whose headers normcheck fetches: the version and the SHA-256 of
#: its manylinux x86-64 and aarch64 files (from PyPI's JSON API, 2026-12-05).  pip refuses any
#: other bytes (hash-checking mode); a newer version is a change here, reviewed.
PINS = {
    "nvidia-cublas": ("13.10.0.20", (
        "dcc6d63884c53d07e267ce7e6feac17b2538cebaafec5db865736c3e28e4dc84",
        "c5f3418c0a845232a8cabc58f6fa52cfae7d8bd3680d94c3907aca710fd48d70")),
    "nvidia-curand": ("10.4.5.25", (
        "22bb226a857e5888fe6b54ae465fc4371296bcff13a35f79e19691bcf454f529",
        "07c75d8ba14b627d1a01d2c1bfa1eece88f25d564d3aae7e6b6fb44f7bbec9c1")),
    "nvidia-cusparse": ("12.9.4.2", (
        "072667e58c851a318738f5527a12eb225cbf058803f2ea451c722d8cf8edddec",
        "e2ce97f185c9c4b285e4a8fbf02cb96dd1b8dd66736ebe2f0a8da5f6012a4fb7")),
    "nvidia-cudnn-cu13": ("9.28.1.4", (
        "a54f205b1db1f2895d99f398754db1369816f0569dd459731f925635cf7b65ec",
        "759b6a4919951ed8ec603dec97b96f6a6396c8269b95b3d345526e2471fb433d")),
    "nvidia-nvtx": ("13.5.25", (
        "f72f21bd338c531afb3f802d03c569e9f7c324739ac332c672a431734d0b5c41",
        "181c68c7e5308aa633015f96462b7064c07a6f3d36bb680a1ddb1b250ae84e8e")),
    "nvidia-cufft": ("12.5.0.14", (
        "b8be26837a5abad2b5b74f3e92dd29f622a42934b355be0961a48712cbba23ad",
        "091cde103312d6e09366122fe3f67092dcfd94cc9785029d695d6bcffaa76fdf")),
    "nvidia-cusolver": ("12.4.1.2", (
        "b3b8e02fd2f2df869369af075dc3a179d43f6f7b85e94632a7dce556697be044",
        "1f54c8e0d5b1ebd183b4c5a79f0709fa90241e8254da381ca5b969ee97c8de32")),
}


def fetch(package: str, echo=None) -> Path:
    """Download ``package``'s pinned wheel (:data:`PINS`, no dependencies), pip confined
    (:mod:`normcheck.backends.fetch`), keep only its ``include`` folder in the build cache, and
    return it.  Raises CompileError naming what went wrong."""
    from normcheck.backends.fetch import Pin, download

    if package not in LIBRARIES:
        raise CompileError(f"normcheck fetches the headers of {', '.join(LIBRARIES)}; "
                           f"not {package!r}")
    have = fetched()
    if package in have:
        return have[package]
    what = LIBRARIES[package][1]
    version, hashes = PINS[package]
    if echo:
        echo(f"normcheck: fetching {what}'s headers (pip download {package}=={version}, "
             "confined, its hash checked; only its include folder is kept, in the build "
             "cache) -- once on this machine")
    root = _fetched_root()
    root.mkdir(parents=True, exist_ok=True)
    d, wheels = download([Pin(package, version, hashes)], f"{what}'s headers")
    try:
        whl = wheels[0]
        version = whl.name.split("-")[1]
        dest = root / f"{package}@{version}"
        tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=root))
        try:
            with zipfile.ZipFile(whl) as z:
                for info in z.infolist():
                    parts = Path(info.filename).parts
                    if "include" not in parts or info.is_dir():
                        continue
                    rel = Path(*parts[parts.index("include") + 1:])
                    if ".." in rel.parts or rel.is_absolute():
                        continue
                    out = tmp / "include" / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(info) as src, open(out, "wb") as f:
                        shutil.copyfileobj(src, f)
            if not (tmp / "include").is_dir():
                raise CompileError(f"{whl.name} holds no include folder")
            if dest.exists():
                shutil.rmtree(tmp)
            else:
                os.replace(tmp, dest)
                record_tree(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if echo:
        size = sum(p.stat().st_size for p in (dest / "include").rglob("*") if p.is_file())
        echo(f"normcheck: kept {what}'s headers: {size / 2**20:.1f} MiB in {dest}")
    return dest / "include"
