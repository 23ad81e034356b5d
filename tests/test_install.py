"""What a user installs is what was tested: the wheel carries the kernels, shim headers and
example specs; builds are keyed by every included file; one cache rule; one backend interface;
the documentation's references hold."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import normcheck
from normcheck import check
from normcheck.backends import base, cache, get_backend
from normcheck.backends.cpu.backend import CpuBackend
from normcheck.backends.cuda import CudaBackend
from normcheck.pytest_plugin import assert_accurate

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_carries_kernels_shim_and_examples(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                        str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    whl = next(tmp_path.glob("normcheck-*.whl"))
    names = set(zipfile.ZipFile(whl).namelist())
    want = {f"normcheck/cuda_src/{p.relative_to(ROOT / 'cuda_src')}"
            for p in (ROOT / "cuda_src").rglob("*") if p.is_file()}
    shim = ROOT / "normcheck" / "backends" / "cpu" / "shim"
    want |= {f"normcheck/backends/cpu/shim/{p.relative_to(shim)}"
             for p in shim.rglob("*") if p.is_file()}
    want.add("normcheck/backends/normcheck_launch.c")
    missing = sorted(want - names)
    assert not missing, f"not in the wheel: {missing}"


def test_cache_rule(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache.cache_root() == tmp_path / "a"
    monkeypatch.delenv("NORMCHECK_CACHE")
    assert cache.cache_root() == tmp_path / "x" / "normcheck"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_root() == Path.home() / ".cache" / "normcheck"
    assert cache.cache_dir("cuda").parent == cache.cache_dir("cpu").parent


def test_editing_an_included_header_changes_the_verdict(tmp_path):
    (tmp_path / "scale.cuh").write_text("#define SCALE 1.0f\n")
    (tmp_path / "k.cu").write_text(
        '#include "scale.cuh"\n'
        'extern "C" __global__ void rms(float* y, const float* x, const float* g, float eps,\n'
        '                               int rows, int cols) {\n'
        '  if (threadIdx.x) return;\n'
        '  const float* xr = x + (size_t)blockIdx.x * cols;\n'
        '  float s = 0.f;\n'
        '  for (int i = 0; i < cols; ++i) s += xr[i] * xr[i];\n'
        '  float r = rsqrtf(s / cols + eps) * SCALE;\n'
        '  for (int i = 0; i < cols; ++i) y[(size_t)blockIdx.x * cols + i] = xr[i] * r * g[i];\n'
        '}\n')
    args = dict(entry="rms", norm="rmsnorm", dtype="fp32", search=0, examples=8)
    assert check.check_kernel(tmp_path / "k.cu", **args).verdict != "fail"
    (tmp_path / "scale.cuh").write_text("#define SCALE 1.001f\n")  # only the header changes
    assert check.check_kernel(tmp_path / "k.cu", **args).verdict == "fail"


def test_cache_info_and_clear(tmp_path):
    env = {"NORMCHECK_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* y) { y[0] = 1; }\n')
    code = ("from normcheck.backends import get_backend; import numpy as np; "
            f"k = get_backend('cpu').compile({str(src)!r}, 'k'); y = np.zeros(1, np.float32); "
            "k(1, 1, [y]); assert y[0] == 1")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    info = subprocess.run([sys.executable, "-m", "normcheck", "cache", "info"], env=env,
                          capture_output=True, text=True, check=True).stdout
    assert str(tmp_path / "cache") in info
    n = int(re.search(r"cpu\s+(\d+) builds", info).group(1))
    assert n >= 1
    clear = subprocess.run([sys.executable, "-m", "normcheck", "cache", "clear"], env=env,
                           capture_output=True, text=True, check=True).stdout
    assert f"removed {n}" in clear
    info = subprocess.run([sys.executable, "-m", "normcheck", "cache", "info"], env=env,
                          capture_output=True, text=True, check=True).stdout
    assert re.search(r"cpu\s+0 builds", info)


def test_one_backend_interface():
    for cls in (CpuBackend, CudaBackend):
        assert issubclass(cls, base.Backend)
        for m in ("compile", "compile_many", "provenance", "unavailable_reason"):
            assert callable(getattr(cls, m))
    assert CpuBackend.unavailable_reason() is None
    assert "PyCUDA" in CudaBackend.unavailable_reason()
    assert get_backend(get_backend("cpu")) is get_backend("cpu")
    p = get_backend("cpu").provenance()
    assert p["fmad"] is False and "seccomp" in p["sandbox"]


_CACHE = str(__import__("normcheck.backends.cache", fromlist=["cache_root"]).cache_root())


def test_assert_accurate_passes_and_fails_with_the_checks_report():
    src = ROOT / "tests" / "cuda" / "check" / "kernels.cu"
    r = assert_accurate(src, entry="rms_good_fp16", norm="rmsnorm", dtype="fp16", search=0,
                        examples=16)
    assert r.verdict in ("pass", "warn")
    # one line: the verdict, the first failure, the cause, the replay (the report under -v)
    with pytest.raises(AssertionError) as e:
        assert_accurate(src, entry="rms_rstd_in_fp16", norm="rmsnorm", dtype="fp16", search=0,
                        examples=16)
    msg = str(e.value)
    assert "\n" not in msg and "FAIL -- [accuracy]" in msg, msg
    assert "cause: rstd rounded to the storage format" in msg and "replay: normcheck replay" in msg
    # the very words of the CLI's verdict line (#64: the plugin gave the model's short title,
    # "squares rounded to the storage format (in fp16 ...)" for a bf16 kernel, where the CLI
    # said what the headline said)
    r = check.check_kernel(src, entry="rms_rstd_in_fp16", norm="rmsnorm", dtype="fp16",
                           search=0, examples=16)
    said = r.render().splitlines()[-1].split("; likely cause: ", 1)[1]
    assert f"likely cause: {said}" in msg, (msg, said)


def test_assert_accurate_in_a_users_suite_is_one_line_without_the_plugins_source(pytester,
                                                                                monkeypatch):
    # pytester gives the inner run a HOME of its own: keep this process's build cache (its
    # worker reads modules only there), as it was before pytester moved HOME
    monkeypatch.setenv("NORMCHECK_CACHE", _CACHE)
    # ... and the ledger's key that seals it (kept under HOME, outside the cache)
    monkeypatch.setenv("NORMCHECK_LEDGER_KEY", str(cache.ledger_key_path()))
    src = ROOT / "tests" / "cuda" / "check" / "kernels.cu"
    pytester.makepyfile(f"""
from normcheck.pytest_plugin import assert_accurate

def test_mine():
    assert_accurate({str(src)!r}, entry="rms_rstd_in_fp16", norm="rmsnorm", dtype="fp16",
                    search=0, examples=8)
""")
    out = pytester.runpytest("-p", "no:cacheprovider").stdout.str()
    assert "normcheck: rms_rstd_in_fp16 FAIL" in out and "pytest -v for the whole report" in out
    assert "def assert_accurate" not in out and "__tracebackhide__" not in out
    verbose = pytester.runpytest("-v", "-p", "no:cacheprovider").stdout.str()
    assert "best built-in" in verbose  # the whole report under -v


def test_design_doc_exists_and_lists_every_module():
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    mods = [p.stem for p in (ROOT / "normcheck").glob("*.py") if not p.stem.startswith("_")]
    mods += [p.name for p in (ROOT / "normcheck").iterdir() if p.is_dir() and
             (p / "__init__.py").exists()]
    missing = [m for m in mods if m not in ("__init__", "__main__") and f"`{m}" not in design
               and f" {m} " not in design and f"{m}/" not in design]
    assert not missing, f"docs/DESIGN.md's module map lacks {missing}"
    for p in list((ROOT / "normcheck").rglob("*.py")) + [ROOT / "README.md"]:
        for m in re.finditer(r"(\S*)DESIGN\.md", p.read_text()):
            assert m.group(1).endswith("docs/") or m.group(1).endswith("(docs/") or \
                "shared" in m.group(1), f"{p}: {m.group(0)}"
    assert normcheck.__version__


def _imports():
    """{module: the normcheck modules it imports (at any level)} and the private names it takes
    from other modules, read from the source."""
    import ast

    mods = {}
    for p in (ROOT / "normcheck").rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    edges, private = {}, []
    for name, p in mods.items():
        tree = ast.parse(p.read_text())
        aliases, deps = {}, set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("normcheck"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    deps.add(full if full in mods else node.module)
                    aliases[a.asname or a.name] = full
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{name}: from {node.module} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("normcheck"):
                        deps.add(a.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and aliases[node.value.id] in mods and \
                    node.attr.startswith("_") and not node.attr.startswith("__"):
                private.append(f"{name}:{node.lineno}: {node.value.id}.{node.attr}")
        edges[name] = {d for d in deps if d in mods and d != name}
    return edges, private


def test_no_import_cycles_and_no_private_names_across_modules():
    """The layout shows the flow (docs/DESIGN.md, "Module map and layers"): no module imports
    one that imports it back, at any distance, and none uses another's private names."""
    edges, private = _imports()
    assert not private, private
    state, cycles = {}, []

    def visit(v, path):
        state[v] = 1
        for w in sorted(edges[v]):
            if state.get(w) == 1:
                cycles.append(path[path.index(w):] + [w])
            elif w not in state:
                visit(w, path + [w])
        state[v] = 2

    for v in sorted(edges):
        if v not in state:
            visit(v, [v])
    assert not cycles, cycles


def _layer_table() -> dict:
    """{module: layer} from docs/DESIGN.md's layer block ("N  a · pkg/ (x, y) · pkg/z ...")."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    block = text.split("## Module map and layers", 1)[1].split("```", 2)[1]
    rows, cur = {}, None
    for line in block.splitlines():
        m = re.match(r"^(\d)\s+(.*)$", line)
        if m:
            cur = int(m.group(1))
            rows[cur] = m.group(2)
        elif line.strip() and cur is not None:
            rows[cur] += " " + line.strip()
    table = {}
    for layer, items in rows.items():
        items = re.sub(r"\([^)]*\)", lambda m: m.group(0).replace("·", ","), items)
        for item in (i.strip() for i in items.split("·")):
            m = re.match(r"^([\w/]+)\s*(?:\(([^)]*)\))?", item)
            if not m:
                continue
            head, inner = m.group(1), m.group(2)
            base = "normcheck." + head.strip("/").replace("/", ".")
            table[base] = layer
            if inner:
                for sub in (s.strip() for s in inner.split(",")):
                    w = re.match(r"^(\w+)", sub)
                    if w and head.endswith("/"):
                        table[f"{base}.{w.group(1)}"] = layer
    return table


def test_every_import_follows_the_layer_table():
    """docs/DESIGN.md's layer table is the law, not a picture: each module imports only modules
    of its own layer or below (a package's __init__ is the package's layer; shim/ holds no
    Python).  A module missing from the table fails here too."""
    edges, _ = _imports()
    table = _layer_table()

    def layer(mod):
        parts = mod.split(".")
        for i in range(len(parts), 1, -1):  # the module, else the package holding it
            if ".".join(parts[:i]) in table:
                return table[".".join(parts[:i])]
        return None

    top = {"normcheck", "normcheck.__main__"}  # the package's face: re-exports, the entry point
    missing = sorted(m for m in edges if m not in top and layer(m) is None)
    assert not missing, f"modules missing from DESIGN's layer table: {missing}"
    wrong = sorted(f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
                   for m, ds in edges.items() if m not in top for d in ds
                   if d not in top and layer(d) is not None and layer(d) > layer(m))
    assert not wrong, wrong


def test_the_quantised_domain_imports_nothing_from_the_checks():
    """quant/ (formats, contracts, the oracle, families, classification, diagnosis) is a domain
    below check/: the quantised check that runs it lives in check/quantised (#33)."""
    edges, _ = _imports()
    wrong = sorted(f"{m} -> {d}" for m, ds in edges.items() if m.startswith("normcheck.quant")
                   for d in ds if d.startswith("normcheck.check"))
    assert not wrong, wrong


#: The numeric core (#46): the formats, the oracle, the bounds, the metrics and the families.
NUMERIC_CORE = ("normcheck.formats", "normcheck.oracle", "normcheck.bounds", "normcheck.metrics",
                "normcheck.families")


def test_the_numeric_core_imports_nothing_of_the_kernels_or_the_backends():
    """The core stands on the ground: none of its modules imports the built-in catalogue or a
    backend, at any level (its compiled parts are built and loaded by normcheck.native, the one
    loader), and importing the bounds loads at most 3 of normcheck's modules."""
    edges, _ = _imports()
    core = [m for m in edges if any(m == c or m.startswith(c + ".") for c in NUMERIC_CORE)]
    assert len(core) >= 8, core
    wrong = sorted(f"{m} -> {d}" for m in core for d in edges[m]
                   if d.startswith(("normcheck.kernels", "normcheck.backends")))
    assert not wrong, wrong
    out = subprocess.run([sys.executable, "-c", "import sys, normcheck.bounds; print(sorted("
                          "m for m in sys.modules if m.startswith('normcheck')))"],
                         capture_output=True, text=True, check=True).stdout
    loaded = eval(out)
    assert len(loaded) <= 3, loaded
    # one loader: only normcheck.native opens a compiled library of normcheck's own
    loaders = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "normcheck").rglob("*.py")
                     if "ctypes.CDLL(str(path))" in p.read_text())
    assert loaders == ["normcheck/native.py"], loaders


def test_no_function_of_the_check_takes_more_than_8_parameters():
    """The check carries objects (#46: CheckOptions, Resolved, Setup, Runs, Findings, Plan):
    no function in check/ takes more than 8 parameters (self, *args and **kw counted)."""
    import ast

    wide = []
    for p in sorted((ROOT / "normcheck" / "check").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + \
                    (a.vararg is not None) + (a.kwarg is not None)
                if n > 8:
                    wide.append(f"{p.name}:{node.lineno} {node.name} ({n})")
    assert not wide, wide


def test_one_predicate_says_whether_a_norm_reads_beta():
    """Norm.reads_beta, asked everywhere: "centred and has β" is not derived again."""
    hits = []
    for p in (ROOT / "normcheck").rglob("*.py"):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"centred and [\w.]*has_beta|has_beta and [\w.]*centred", line):
                hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert hits == ["normcheck/norms.py:62: return self.centred and self.has_beta"], hits


def test_no_module_outside_the_backends_compares_a_backend_name():
    """What a backend can do is its Capabilities (host launches, block orders, fill bytes, device
    timings ...), asked by every check and the report: a second GPU library is one backend (#33)."""
    hits = []
    for p in (ROOT / "normcheck").rglob("*.py"):
        if "backends" in p.relative_to(ROOT / "normcheck").parts:
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"""[!=]= ["'](cpu|cuda)["']|in \(["'](cpu|cuda)["']""", line):
                hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, hits


def test_an_executable_still_open_for_writing_elsewhere_is_started_once_it_is_released(
        tmp_path):
    """The classic ETXTBSY race of parallel builds (#64: one first run in three died with
    'g++ could not be started (Text file busy)'): a freshly installed binary is still open for
    writing in a child another thread forked while it was written.  Here a process holds it
    open for writing for 0.4 s: a plain exec fails, confine.spawn waits it out."""
    import errno
    import shutil

    from normcheck.backends import confine

    exe = tmp_path / "tool"
    shutil.copy(shutil.which("echo"), exe)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], "
                               "'ab'); print('open', flush=True); time.sleep(0.4)", str(exe)],
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"open\n"
        with pytest.raises(OSError) as e:
            subprocess.run([str(exe), "x"])
        assert e.value.errno == errno.ETXTBSY  # the shape that broke
        r = confine.spawn(subprocess.run, [str(exe), "ok"], capture_output=True)
        assert r.returncode == 0 and r.stdout == b"ok\n"
    finally:
        holder.wait(10)
        holder.stdout.close()


def test_a_second_entry_of_a_file_reuses_its_build(tmp_path, monkeypatch):
    """Builds are keyed by the text, not by the entry (#64: a second --entry of the same file
    was compiled again, 14 s + 15 s): one build holds the file's every plain kernel; a
    template's instantiation, or a file where that does not compile, is built for its own."""
    monkeypatch.setenv("NORMCHECK_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "two.cu"
    src.write_text(
        'extern "C" __global__ void ka(float* y) { y[threadIdx.x] = 1.f; }\n'
        'extern "C" __global__ void kb(float* y) { y[threadIdx.x] = 2.f; }\n'
        'template <int N> __global__ void kt(float* y) { y[threadIdx.x] = N; }\n'
        'namespace inner { __global__ void kn(float* y) { y[threadIdx.x] = 3.f; } }\n')
    be = get_backend("cpu")

    def built():
        return sorted((tmp_path / "cache").rglob("kernel.so"))

    ka = be.compile(src, "ka")
    first = built()
    assert len(first) == 1
    kb = be.compile(src, "kb")
    assert built() == first  # the same build: no second compile
    import numpy as np

    for k, v in ((ka, 1.0), (kb, 2.0)):
        y = np.zeros(4, np.float32)
        k(1, 4, [y])
        assert list(y) == [v] * 4
    assert sorted(kb.module.entries) == ["ka", "kb"]  # not the template, nor the namespace's
