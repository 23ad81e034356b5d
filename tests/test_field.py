"""The field (normcheck.field): the corpus is whole and consistent, release files are read as
pinned data, the field's verdicts are compared with the recorded ones and rendered, and the
fixes the field's files needed hold on our own small sources (macro-made pragmas, an unresolved
host call named, a stood-in decorator).  The corpus itself runs in CI (`.ci/run`: `normcheck
field`), where the registry is reachable; nothing here needs the network."""

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from normcheck import spec as specs
from normcheck.backends import fetch
from normcheck.errors import CompileError, SpecError
from normcheck.field import corpus, judge, sources
from normcheck.report import field as section

HERE = Path(__file__).parent


def test_the_corpus_is_whole():
    c = corpus.load()
    kernels = c.kernels
    # the issues' floor (#56): 50 kernels of 20 projects, CUDA and Triton, LayerNorm and
    # RMSNorm, fused residual, backward and quantised
    assert len(kernels) >= 50 and len({s.project for s in c.sources.values()}) >= 20
    langs = {k.language for k in kernels}
    assert langs == {"cuda", "triton"}
    norms, backward, quant = set(), False, False
    for k in kernels:
        data = tomllib.loads(k.spec.read_text())
        norms.add(data["norm"])
        backward |= bool(data.get("backward"))
        quant |= any(a.get("role") == "scale" for a in data.get("args", []))
        # the kernel's file and every file it names are pinned members of its release
        src = c.sources[k.project]
        assert data["source"] in src.files, (k.name, data["source"])
        for inc in data.get("include", []):
            assert any(f.startswith(inc.rstrip("/") + "/") for f in src.files), (k.name, inc)
        if k.expect != "pass":
            assert k.cause, f"{k.name}: a recorded {k.expect} names its cause"
        assert k.why.strip()
    assert {"layernorm", "rmsnorm"} <= norms and any(n.startswith("add_") for n in norms)
    assert backward and quant


def test_every_spec_is_a_kernel_of_the_corpus():
    names = {k.base or k.name for k in corpus.load().kernels}
    on_disk = {p.stem for p in corpus.SPECS.glob("*.toml")}
    assert on_disk == names, on_disk ^ names


def test_a_bad_corpus_is_refused_naming_the_entry(tmp_path):
    text = corpus.CORPUS.read_text()
    bad = tmp_path / "corpus.toml"
    bad.write_text(text.replace('expect = "pass"', 'expect = "maybe"', 1))
    with pytest.raises(SpecError, match="expect='maybe'"):
        corpus.load(bad)
    first = corpus.load().kernels[0].name
    bad.write_text(text + f'\n[[kernel]]\nname = "{first}"\nproject = "vllm"\nexpect = "pass"\n'
                          'why = "twice"\n')
    with pytest.raises(SpecError, match="named twice"):
        corpus.load(bad)


def test_select_by_name_project_or_glob():
    c = corpus.load()
    # a kernel's name selects it and the rows of its other formats
    assert [k.name for k in c.select(["vllm_rms_norm"])] == ["vllm_rms_norm",
                                                              "vllm_rms_norm[fp16]"]
    assert [k.name for k in c.select(["vllm_rms_norm_static_fp8"])] == \
        ["vllm_rms_norm_static_fp8"]
    assert all(k.project == "liger-kernel" for k in c.select(["liger-kernel"]))
    assert {k.name for k in c.select(["flashinfer_*"])} == \
        {k.name for k in c.kernels if k.name.startswith("flashinfer_")}
    with pytest.raises(Exception, match="--only"):
        c.select(["no_such_kernel"])


def test_record_writes_what_was_measured(tmp_path):
    p = tmp_path / "corpus.toml"
    shutil.copy(corpus.CORPUS, p)
    # corpus.load checks each spec beside the real corpus: the copy's names are the same
    k = corpus.load(p).kernels[0]
    o = judge.Outcome(k.name, k.project, "v", k.language, "", k.expect, k.cause, k.why,
                      verdict="fail", cause="one_pass")
    assert corpus.record([o], p) == [k.name]
    again = {x.name: x for x in corpus.load(p).kernels}[k.name]
    assert (again.expect, again.cause, again.why) == ("fail", "one_pass", k.why)
    assert corpus.record([o], p) == []  # nothing changed the second time
    o.verdict, o.cause = "pass", None
    corpus.record([o], p)
    assert {x.name: x for x in corpus.load(p).kernels}[k.name].cause is None


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


def _sdist(path, top, members):
    with tarfile.open(path, "w:gz") as t:
        for n, data in members.items():
            info = tarfile.TarInfo(f"{top}/{n}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def _sha(b):
    return hashlib.sha256(b).hexdigest()


def test_extract_takes_only_pinned_members(tmp_path):
    data = {"pkg/ops/rms.py": b"print('kernel')\n", "pkg/setup_hook.py": b"import os\n"}
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    _zip(whl, data)
    dest = tmp_path / "out"
    fetch.extract(whl, {"pkg/ops/rms.py": _sha(data["pkg/ops/rms.py"])}, dest)
    assert (dest / "pkg/ops/rms.py").read_bytes() == data["pkg/ops/rms.py"]
    assert not (dest / "pkg/setup_hook.py").exists()
    # a source distribution: its top folder is not part of a member's name
    sd = tmp_path / "pkg-1.0.tar.gz"
    _sdist(sd, "pkg-1.0", {"csrc/norm.cu": b"// norm\n"})
    fetch.extract(sd, {"csrc/norm.cu": _sha(b"// norm\n")}, tmp_path / "sd")
    assert (tmp_path / "sd/csrc/norm.cu").read_bytes() == b"// norm\n"


def test_extract_refuses_a_changed_or_missing_member(tmp_path):
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    _zip(whl, {"pkg/ops/rms.py": b"changed\n"})
    with pytest.raises(CompileError, match="is not the pinned file"):
        fetch.extract(whl, {"pkg/ops/rms.py": _sha(b"original\n")}, tmp_path / "a")
    with pytest.raises(CompileError, match="holds no file pkg/other.py"):
        fetch.extract(whl, {"pkg/other.py": _sha(b"x")}, tmp_path / "b")
    assert not (tmp_path / "a" / "pkg").exists()


def test_a_release_is_fetched_once_and_refetched_when_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMCHECK_CACHE_DIR", str(tmp_path / "cache"))
    body = b"@triton.jit\ndef k(): pass\n"
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    _zip(whl, {"pkg/k.py": body})
    calls = []

    def fake_download(pin, what):
        calls.append(pin.filename)
        d = tmp_path / f"dl{len(calls)}"
        d.mkdir()
        shutil.copy(whl, d / "file")
        return d, d / "file"

    monkeypatch.setattr(fetch, "download_file", fake_download)
    src = corpus.Source("pkg", "1.0", whl.name, _sha(whl.read_bytes()), "",
                        {"pkg/k.py": _sha(body)})
    r = sources.fetched(src)
    assert (r / "pkg/k.py").read_bytes() == body and sources.ready(src)
    assert sources.fetched(src) == r and len(calls) == 1  # cached
    (r / "pkg/k.py").write_bytes(b"tampered\n")
    assert not sources.ready(src)
    sources.fetched(src)
    assert len(calls) == 2 and (r / "pkg/k.py").read_bytes() == body
    # a file that is not pinned, planted beside them (an __init__.py an op row's import runs,
    # #65): the folder holds exactly its pinned files, so it is fetched again, the file gone
    (r / "pkg" / "__init__.py").write_text("raise SystemExit('planted')\n")
    assert not sources.ready(src)
    sources.fetched(src)
    assert len(calls) == 3 and not (r / "pkg" / "__init__.py").exists()


def test_a_spec_names_files_of_its_repository(tmp_path):
    # a spec in tests/norms/ naming ../../csrc/rms.cu: the repository's root (a folder holding
    # .git) is the spec's root, so the usual layout works; outside it is still refused
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "csrc").mkdir()
    (repo / "csrc/rms.cu").write_text("// a kernel\n")
    (repo / "tests/norms").mkdir(parents=True)
    sp = repo / "tests/norms/rms.toml"
    args = '[[args]]\nrole = "output"\n[[args]]\nrole = "input"\n[[args]]\nrole = "eps"\n'
    sp.write_text('source = "../../csrc/rms.cu"\nentry = "rms"\nnorm = "rmsnorm"\n'
                  'dtype = "fp32"\n' + args)
    loaded = specs.load(sp)
    assert Path(loaded.source).resolve() == (repo / "csrc/rms.cu").resolve()
    (tmp_path / "outside.cu").write_text("// not the repository's\n")
    sp.write_text('source = "../../../outside.cu"\nentry = "rms"\nnorm = "rmsnorm"\n'
                  'dtype = "fp32"\n' + args)
    with pytest.raises(SpecError):
        specs.load(sp)


def _outcome(**kw):
    base = dict(name="k1", project="proj", version="1.0", language="cuda", file="k.cu",
                expect="pass", expect_cause=None, why="because")
    base.update(kw)
    return judge.Outcome(**base)


def test_the_section_shows_each_kernel_and_marks_a_changed_verdict():
    outs = [
        _outcome(verdict="pass", families=[["gaussian", 0.5, 0.25, 0.01],
                                           ["offset", 2.0, 0.75, -0.2]], norm="rmsnorm",
                 formats="fp16 -> fp16"),
        _outcome(name="k2", expect="fail", expect_cause="one_pass", verdict="pass"),
        _outcome(name="k3", error="CompileError: no such header"),
        _outcome(name="k4", language="triton", skipped="Triton is not installed here"),
    ]
    md = section.markdown([o.as_dict() for o in outs])
    rows = {ln.split("|")[1].strip(): ln for ln in md.splitlines() if ln.startswith("| k")}
    assert "offset" in rows["k1"] and "0.75" in rows["k1"]  # the worst family by × bound
    assert "**PASS** (recorded FAIL)" in rows["k2"]
    assert "**not run**" in rows["k3"] and "no such header" in rows["k3"]
    assert "skipped" in rows["k4"]
    line = section.summary_line([o.as_dict() for o in outs])
    assert line.startswith("4 kernels of 1 projects: 2 ran") and "1 as recorded, 1 differ" in line
    assert "1 skipped" in line and "1 could not run" in line


def test_a_kernel_that_needs_torch_is_skipped_with_the_install_where_torch_is_not_usable(
        monkeypatch):
    """On the README's install (no torch) the kernels whose files need torch's headers or its
    import are skipped, saying so and how to run them, and the field exits 0 (it exited 1 with
    tracebacks from the torch stand-in)."""
    c = corpus.load()
    needy = [k for k in c.kernels if "torch" in k.needs]
    assert {k.project for k in needy} >= {"vllm", "unsloth", "flash-attn"}
    monkeypatch.setattr(judge, "_unusable", lambda need: f"{need} is not installed")
    monkeypatch.setattr(sources, "fetched", lambda src, echo=None: pytest.fail("fetched"))
    o = judge.judge_one(needy[0], c.sources[needy[0].project])
    assert not o.ran and not o.error and o.skipped.startswith("needs torch: torch is not "
                                                              "installed; pip install torch")
    assert "skipped (1: needs torch" in section.summary_line([o.as_dict()])


def test_an_op_row_needs_torch_and_is_skipped_with_the_install_that_runs_it(monkeypatch):
    """An op's host code is called on torch tensors: on the README's test install (Triton, no
    torch) Liger's op rows ended as 'CompileError: ... AttributeError: __version__' from the
    torch stand-in, and the field exited 1 (#64); now they are skipped like every torch row."""
    c = corpus.load()
    ops = [k for k in c.kernels if k.name.endswith("_op") or "_op[" in k.name]
    assert ops and not any("torch" in k.needs for k in ops)  # no corpus entry says it
    monkeypatch.setattr(judge, "_unusable", lambda need: f"{need} is not installed")
    monkeypatch.setattr(sources, "fetched", lambda src, echo=None: pytest.fail("fetched"))
    for k in ops:
        o = judge.judge_one(k, c.sources[k.project])
        assert not o.ran and not o.error and o.skipped.startswith("needs torch"), k.name
        assert not o.matches and o.as_dict()["skipped"]


def test_a_corpus_kernel_needs_only_what_normcheck_knows(tmp_path):
    text = corpus.CORPUS.read_text().replace('needs = ["torch"]', 'needs = ["tensorflow"]', 1)
    (tmp_path / "corpus.toml").write_text(text)
    with pytest.raises(SpecError, match=r"needs=\['tensorflow'\]: expected a list of \['torch'\]"):
        corpus.load(tmp_path / "corpus.toml")


def test_an_outcome_matches_only_its_recorded_verdict_and_cause():
    assert _outcome(verdict="pass").matches
    assert not _outcome(verdict="warn").matches
    assert _outcome(expect="fail", expect_cause="one_pass", verdict="fail",
                    cause="one_pass").matches
    assert not _outcome(expect="fail", expect_cause="one_pass", verdict="fail",
                        cause="storage_sums").matches
    assert not _outcome(error="boom").matches  # an error is never a match


def test_the_field_judges_projects_in_parallel_and_keeps_the_corpus_order(monkeypatch):
    """#67: `normcheck field` judges a project's kernels in turn in one of --jobs processes
    (a project's kernels share their builds), each release fetched once before any judge;
    the outcomes come back in the corpus' order whatever order the projects end in, a line
    each, and each launch runs its blocks on one thread (the first faulting block, and the
    finding docs/field.md cites, the same every run).  The processes are threads here (a
    spawned process would not see the stand-ins); _judge_rows is what a process runs."""
    import os
    import pickle
    import threading
    from concurrent.futures import ThreadPoolExecutor

    pickle.dumps(judge._judge_rows)  # what a process runs is found by its name there
    c = corpus.load()
    names = ["ggml_norm", "liger_rms_norm", "liger_rms_norm[fp16]", "cutlass_rmsnorm"]
    fetched, seen, env = [], {}, set()

    def one(k, src, save_dir=None, echo=None):
        import time

        time.sleep(0.2 if k.project == "liger-kernel" else 0.0)  # the big project ends last
        seen.setdefault(k.project, set()).add(threading.get_ident())
        env.add(os.environ.get("NORMCHECK_LAUNCH_WORKERS"))
        return judge.Outcome(k.name, k.project, src.version, k.language, "", k.expect,
                             k.cause, k.why, verdict=k.expect)

    monkeypatch.setattr(judge, "judge_one", one)
    monkeypatch.setattr(judge.sources, "fetched", lambda src, echo=None: fetched.append(
        src.project))
    monkeypatch.setattr(judge, "_pool", lambda jobs: ThreadPoolExecutor(jobs))
    monkeypatch.setattr(judge, "_judge_rows", lambda path, ns, save_dir: [
        one(next(k for k in c.kernels if k.name == n), c.sources[next(
            k for k in c.kernels if k.name == n).project]) for n in ns])
    lines = []
    outs = judge.judge_field(only=names, jobs=2, echo=lines.append)
    assert [o.name for o in outs] == [k.name for k in c.select(names)]  # the corpus' order
    assert sorted(fetched) == sorted(set(fetched)) and len(fetched) == 3  # once a release
    assert all(len(t) == 1 for t in seen.values())  # a project's kernels in one worker
    assert env == {"1"} and len([ln for ln in lines if ln.startswith("[")]) == 4
    assert "NORMCHECK_LAUNCH_WORKERS" not in os.environ  # put back as it was


def test_field_list_names_every_kernel():
    r = subprocess.run([sys.executable, "-m", "normcheck", "field", "--list"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    c = corpus.load()
    for k in c.kernels:
        assert k.name in r.stdout
    bases = {k.base or k.name for k in c.kernels}
    assert f"{len(bases)} kernels ({len(c.kernels)} rows with their other formats) of " \
        f"{len(c.sources)} projects" in r.stdout


# -- the general fixes the field's files needed, on our own sources --------------------------

PRAGMA_SRC = r"""
#define PRAGMA_UNROLL #pragma unroll
#define PRAGMA_NO_UNROLL #pragma unroll 1
extern "C" __global__ void rms_macro_pragmas(float* y, const float* x, const float* g,
                                             float eps, int rows, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  __shared__ float total;
  if (threadIdx.x == 0) {
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
    PRAGMA_NO_UNROLL
    for (int j = 0; j < cols; ++j) ss[j % 4] += xr[j] * xr[j];
    PRAGMA_UNROLL for (int k = 1; k < 4; ++k) ss[0] += ss[k];
    total = ss[0];
  }
  __syncthreads();
  const float r = 1.0f / sqrtf(total / cols + eps);
  PRAGMA_UNROLL
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    y[(size_t)blockIdx.x * cols + j] = xr[j] * r * g[j];
}
"""


def test_a_macro_made_pragma_compiles(tmp_path, monkeypatch):
    # `#define PRAGMA_UNROLL #pragma unroll` (FasterTransformer, CUTLASS): nvcc takes the '#'
    # in the expansion, g++ calls it stray; the cpu backend drops the hint
    from normcheck import check

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "pragmas.cu"
    src.write_text(PRAGMA_SRC)
    r = check.check_kernel(src, "rms_macro_pragmas", "rmsnorm", "fp32", examples=4, search=0,
                           timeout=30)
    # sound (within the bound everywhere); one thread's four running sums may warn against
    # the built-in's tree on the offset rows -- but had a loop been taken with its pragma, the
    # sum would be a quarter of the row's and fail
    assert r.verdict in ("pass", "warn"), r.render()
    assert all(f.max_of_bound <= 1 for f in r.families), r.render()


def test_unroll_hints_are_dropped_and_nothing_else():
    from normcheck.backends.cpu.translate import _unroll_pragmas

    text = ('#pragma once\n  #pragma unroll\n  for (;;) {}\n x; #pragma unroll 4 for (i) '
            '{ #pragma unroll (N) y; } #pragma nounroll while\n#pragma GCC diagnostic push\n')
    out = _unroll_pragmas(text)
    assert "unroll" not in out.replace("GCC", "")
    assert "#pragma once" in out and "#pragma GCC diagnostic push" in out
    assert "for (;;) {}" in out and "for (i)" in out and "y; }" in out and "while" in out


HOST_SRC = r"""
int project_device();  // defined in another file of the project
__global__ void rms_k(float* y, const float* x, int cols) {
  y[blockIdx.x * cols + threadIdx.x] = x[blockIdx.x * cols + threadIdx.x];
}
void launch_rms(float* y, const float* x, const float* g, float eps, int rows, int cols) {
  if (project_device() < 0) return;
  rms_k<<<rows, cols>>>(y, x, cols);
}
"""


def _host_spec(tmp_path, source: str):
    """host.cu (``source``: launch_rms, the default ABI's arguments) and its host spec."""
    (tmp_path / "host.cu").write_text(source)
    sp = tmp_path / "host.toml"
    sp.write_text('source = "host.cu"\nentry = "launch_rms"\nnorm = "rmsnorm"\ndtype = "fp32"\n'
                  'cols = [1, 64]\n[launch]\nhost = true\n'
                  '[[args]]\nrole = "output"\n[[args]]\nrole = "input"\n[[args]]\n'
                  'role = "gamma"\n[[args]]\nrole = "eps"\n[[args]]\nrole = "rows"\n'
                  '[[args]]\nrole = "cols"\n')
    return sp


def test_a_host_launcher_calling_a_function_defined_elsewhere_names_it(tmp_path, monkeypatch):
    from normcheck import check

    monkeypatch.chdir(tmp_path)
    sp = _host_spec(tmp_path, HOST_SRC)
    with pytest.raises(Exception, match=r"project_device\(\)"):
        r = check.run(check.CheckOptions(spec=specs.load(sp), examples=2, search=0))
        raise AssertionError(r.render())


QUERY_SRC = r"""
int mylib_get_device();  // defined in another file of the project (ggml_cuda_get_device's shape)
__global__ void rms_k(float* y, const float* x, const float* g, float eps, int cols) {
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int i = 0; i < cols; ++i) s += xr[i] * xr[i];
    const float r = rsqrtf(s / cols + eps);
    for (int i = 0; i < cols; ++i) yr[i] = xr[i] * r * g[i];
  }
}
void launch_rms(float* y, const float* x, const float* g, float eps, int rows, int cols) {
  if (mylib_get_device() != 0) return;  // a device that is not the one presented: no launch
  rms_k<<<rows, 32>>>(y, x, g, eps, cols);
}
"""


def test_a_host_launchers_device_query_is_answered_as_the_presented_gpu(tmp_path, monkeypatch):
    """#68: llama.cpp's RMSNorm launcher asks ggml_cuda_get_device(), defined in a file of the
    library a kernel's build does not load -- it was refused by name; a host function that
    says it returns the current device, taking nothing, is answered as the presented GPU
    answers it (device 0) and the kernel is judged.  Any other such call is still named."""
    from normcheck import check

    monkeypatch.chdir(tmp_path)
    sp = _host_spec(tmp_path, QUERY_SRC)
    r = check.run(check.CheckOptions(spec=specs.load(sp), examples=2, search=0))
    assert r.verdict in ("pass", "warn") and not r.failures, r.render()
    assert {fr.family for fr in r.families} >= {"gaussian", "offset"}


#: A sound Triton RMSNorm, the kernel of the stand-in tests below.
RMS_KERNEL = '''
@triton.jit
def rms_kernel(Y, X, W, eps, rows, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    x = tl.load(X + row * cols + offs, mask=m, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(Y + row * cols + offs, (x * r * w).to(Y.dtype.element_ty), mask=m)
'''

STUB_SRC = '''
import triton
import triton.language as tl
from not_installed_anywhere.utils import libentry


@libentry()''' + RMS_KERNEL


FIND_SPEC_SRC = '''
from importlib.util import find_spec

import triton
import triton.language as tl

HAS_NPU = find_spec("not_installed_anywhere_npu") is not None  # vLLM-Omni's mindiesd probe


def host_only():
    import not_installed_anywhere_npu  # a path the kernel never takes
    return not_installed_anywhere_npu

''' + RMS_KERNEL


def test_a_file_asking_find_spec_of_a_stood_in_module_loads(tmp_path, monkeypatch):
    """#68: a module a file imports somewhere but that is not installed is stood in for as the
    file loads; asked of importlib.util.find_spec at the file's top level (vLLM-Omni's
    `find_spec("mindiesd")`), a stand-in with no spec raised ValueError and the file never
    loaded -- it has a spec now, and the kernel is judged."""
    pytest.importorskip("triton")
    from normcheck import check

    monkeypatch.chdir(tmp_path)
    (tmp_path / "probe.py").write_text(FIND_SPEC_SRC)
    r = check.check_kernel(tmp_path / "probe.py", "rms_kernel", "rmsnorm", "bf16", search=0,
                           examples=4)
    assert r.verdict in ("pass", "warn") and not r.failures, r.render()


def test_a_stood_in_decorator_leaves_the_kernel_as_written(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from normcheck import check

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "gems_style.py"
    src.write_text(STUB_SRC)
    r = check.check_kernel(src, "rms_kernel", "rmsnorm", "fp16", examples=2, search=0,
                           timeout=60)
    assert r.verdict == "pass", r.render()


def test_a_fault_or_a_non_finite_output_stands_in_place_of_the_figures():
    """A family failed by a fault or a non-finite output shows that, never a finite × bound
    beside it (the table read `FAIL | tails | inf | 0.499`); failures lead."""
    outs = [_outcome(name="k1", verdict="fail", expect="fail", families=[
                ["gaussian", 0.5, 0.49, 0.0, "pass", []],
                ["tails", 0.5, 0.499, 0.0, "fail", ["misaligned"]]]),
            _outcome(name="k2", verdict="fail", expect="fail", families=[
                ["offset", float("inf"), 0.347, None, "fail", ["nonfinite"]]]),
            _outcome(name="k3", verdict="fail", expect="fail", families=[
                ["gaussian", 3.0, 1.0004, 0.0, "fail", ["accuracy"]]])]
    md = section.markdown([o.as_dict() for o in outs])
    rows = {}
    for ln in md.splitlines():  # the main table's row (the families' table comes after)
        if ln.startswith("| k"):
            rows.setdefault(ln.split("|")[1].strip(), ln)
    cells = [c.strip() for c in rows["k1"].split("|")]
    assert cells[8:12] == ["tails", "misaligned", "-", "-"], cells
    assert "non-finite" in rows["k2"] and "0.347" not in rows["k2"]
    assert "| 1.0004 |" in rows["k3"]  # enough digits to show why it fails


def test_the_table_puts_failures_first_and_lists_every_finding_in_full():
    """#56: failures (and verdicts off their record) before passes; each kernel's widths; every
    distinct finding -- the headline's first -- in full, never cut mid-word."""
    long = "a cause " + "word " * 80 + "END"
    outs = [_outcome(name="k_pass", verdict="pass", families=[["gaussian", 0.5, 0.25, 0.0]],
                     widths=[1, 768, 4096]),
            _outcome(name="k_fail", verdict="fail", expect="fail", cause="fault_misaligned",
                     widths=[8, 16],
                     findings=[{"kind": "misaligned", "families": ["gaussian"],
                                "cause_key": "fault_misaligned", "text": long},
                               {"kind": "nonfinite", "families": ["tails"],
                                "cause_key": None, "text": "nonfinite: 3 spurious_nan"}]),
            _outcome(name="k_diff", verdict="pass", expect="fail")]
    md = section.markdown([o.as_dict() for o in outs])
    order = [ln.split("|")[1].strip() for ln in md.split("Every finding")[0].splitlines()
             if ln.startswith("| k_")]
    assert order == ["k_diff", "k_fail", "k_pass"], order
    assert "| 8,16 |" in md and "| 1,768,4096 |" in md
    found = md.split("Every finding")[1].split("Each kernel's families")[0]
    assert "END" in found and "headline; misaligned on gaussian (fault_misaligned)" in found
    assert found.index("fault_misaligned") < found.index("spurious_nan")
    assert "k_pass" not in found


def test_findings_are_grouped_by_cause_with_trigger_and_severity():
    """#68: a reader wants kernels grouped by cause, each with its trigger and a severity to
    weigh -- a format row is its kernel's, the source line cited by file name, the most
    severe cause first (wrong where models run before past 2^31 elements)."""
    wrap = {"kind": "out_of_bounds", "families": ["large_index"],
            "cause_key": "fault_out_of_bounds",
            "text": "an access outside an array: k: out-of-bounds read ... at /cache/x/y/norm.cu:37"}
    pitch = {"kind": "misaligned", "families": ["gaussian"], "cause_key": "fault_misaligned",
             "text": "with rows padded to a pitch of cols + 1: misaligned 16-byte load at v.cuh:83"}
    odd = {"kind": "unwritten", "families": ["tails"], "cause_key": None,
           "text": "unwritten: 3/3 never written, first at row 0, col 0, width 1, 3 rows"}
    outs = [_outcome(name="a", verdict="fail", expect="fail", findings=[wrap, pitch]),
            _outcome(name="a[fp16]", verdict="fail", expect="fail", findings=[wrap]),
            _outcome(name="b", verdict="fail", expect="fail", findings=[wrap, odd])]
    rows = section.by_cause([o.as_dict() for o in outs])[2:]
    assert [r.split("|")[1].strip() for r in rows] == [
        "fault_misaligned", "unwritten (no cause named)", "fault_out_of_bounds"], rows
    assert "wrong at shapes models use" in rows[0] and "a row pitch past cols" in rows[0]
    assert "at a width no model has" in rows[1] and "width 1" in rows[1]
    assert "past 2^31 elements" in rows[2] and "524,288 rows of 4096" in rows[2]
    assert "a (norm.cu:37), b (norm.cu:37) |" in rows[2]  # a[fp16] is a's; no cache path
    assert section.trigger({"kind": "unwritten", "families": ["large_index_u32"],
                            "text": ""})[1] == "past 2^32 elements"
    md = section.markdown([o.as_dict() for o in outs])
    assert "The findings by cause" in md


def test_findings_are_distinct_and_the_headlines_first():
    from normcheck.causes import Cause
    from normcheck.check.engine import Failure

    stat = Cause("sums in storage", "storage_sums", "stat")
    fault = Cause("misaligned at x", "fault_misaligned", "fault")

    class R:
        failures = [Failure("accuracy", "gaussian", "off", cause=stat),
                    Failure("accuracy", "offset", "off", cause=stat),
                    Failure("misaligned", "tails", "at x", cause=fault),
                    Failure("nonfinite", "special", "2 spurious_nan")]
        cause = fault

    got = judge.findings(R())
    assert [f["cause_key"] for f in got] == ["fault_misaligned", "storage_sums", None]
    assert got[1]["families"] == ["gaussian", "offset"]
    assert got[2]["text"] == "nonfinite: 2 spurious_nan"


def test_field_json_renders_again(tmp_path):
    outs = [_outcome(verdict="pass", families=[["gaussian", 0.5, 0.25, None]]).as_dict()]
    p = tmp_path / "field.json"
    p.write_text(json.dumps(outs))
    # × bound first, then max ulp and bias
    assert "gaussian 0.25 / 0.5 / -" in section.markdown(json.loads(p.read_text()))


CUTE_SRC = '''
import cutlass
import cutlass.cute as cute
from quack.autotuner import autotune


class RMSNorm:
    @cute.kernel
    def kernel(self, mX, mW, mO):
        pass


@autotune(configs=[])
def rmsnorm_fwd(x, w):
    return x
'''

CUTILE_SRC = '''
import cuda.tile as ct
import triton


@ct.kernel(occupancy=1)
def rms_fwd(X, W, Y, eps):
    pass
'''


@pytest.mark.parametrize("text,entry,lang", [
    (CUTE_SRC, "kernel", "CuTe DSL"), (CUTE_SRC, "rmsnorm_fwd", "CuTe DSL"),
    (CUTILE_SRC, "rms_fwd", "cuTile")])
def test_cute_dsl_and_cutile_are_refused_by_name(text, entry, lang):
    from normcheck.backends.triton.backend import signature
    from normcheck.errors import Unsupported

    # never taken for Triton (quack's @autotune is not triton.autotune), never "name the
    # kernel, not its Python wrapper"
    with pytest.raises(Unsupported, match=f"{lang}: not supported yet"):
        signature(text, entry, "k.py")


def test_a_spec_argument_named_for_another_parameter_is_refused(tmp_path):
    from normcheck import check

    (tmp_path / "k.cu").write_text(
        "__global__ void rms(float* Y, const float* X, const float* W, float eps, int rows, "
        "int cols) {}\n")
    sp = tmp_path / "k.toml"
    sp.write_text('source = "k.cu"\nentry = "rms"\nnorm = "rmsnorm"\ndtype = "fp32"\n'
                  '[[args]]\nrole = "output"\nname = "Y"\n[[args]]\nrole = "gamma"\nname = "W"\n'
                  '[[args]]\nrole = "input"\nname = "X"\n[[args]]\nrole = "eps"\n[[args]]\n'
                  'role = "rows"\n[[args]]\nrole = "cols"\n')
    with pytest.raises(SpecError, match=r"args\[1\] is named 'W' but parameter 2 of rms is 'X'; "
                                        r"'W' is parameter 3"):
        check.run(check.CheckOptions(spec=specs.load(sp), examples=1, search=0))


def test_spec_guesses_read_names_as_kernels_use_them():
    from normcheck.backends.base import Param
    from normcheck.backends.triton.backend import signature
    from normcheck.skeleton import guess_role, skeleton, triton_params

    assert guess_role("scale", Param("const __half*", 8, 2))[0] == "gamma"
    assert guess_role("bias", Param("const __half*", 8, 2))[0] == "beta"
    for n in ("hidden", "hidden_size", "n_cols", "N", "D"):
        assert guess_role(n, Param("int", 4, 0))[0] == "cols", n
    assert guess_role("M", Param("int", 4, 0))[0] == "rows"
    text = ("import triton\nimport triton.language as tl\n@triton.jit\n"
            "def k(X, Y, W, RESIDUAL_OUT, ROWSCALE, stride_x_row, M, N, eps, "
            "BLOCK_N: tl.constexpr):\n    pass\n")
    names, params = triton_params(signature(text, "k", "k.py"))
    toml, rows = skeleton("k.py", "k", params, names=names)
    roles = {nm: role for nm, _, role, _ in rows}
    assert roles == {"X": "input", "Y": "output", "W": "gamma", "RESIDUAL_OUT": "h",
                     "ROWSCALE": "null", "stride_x_row": "stride", "M": "rows", "N": "cols",
                     "eps": "eps", "BLOCK_N": "const"}
    # a Triton pointer is not said to be const (Triton declares no types)
    assert "# pointer X: named 'X'" in toml and "const T*" not in toml
    assert 'name = "W"' in toml


def test_a_header_on_no_path_is_named_with_its_fix(tmp_path, monkeypatch):
    from normcheck import check

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "k.cu"
    src.write_text('#include <cutlass/cutlass.h>\nextern "C" __global__ void k(float* y, '
                   'const float* x, const float* g, float eps, int rows, int cols) {}\n')
    with pytest.raises(CompileError, match=r"includes cutlass/cutlass.h, which is on no include "
                                           r"path .* -I DIR .* nvidia-cutlass package ships it"):
        check.check_kernel(src, "k", "rmsnorm", "fp32", examples=1, search=0)


def test_the_profiler_header_builds(tmp_path, monkeypatch):
    # cuda_profiler_api.h (llm.c's llmc/, DeepSpeed): the toolkit's, not the runtime wheel's
    from normcheck import check

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "k.cu"
    src.write_text("#include <cuda_profiler_api.h>\n" + PRAGMA_SRC +
                   "void profile(bool on) { if (on) cudaProfilerStart(); else cudaProfilerStop(); }\n")
    r = check.check_kernel(src, "rms_macro_pragmas", "rmsnorm", "fp32", examples=2, search=0,
                           timeout=30)
    assert all(f.max_of_bound <= 1 for f in r.families), r.render()


def test_triton_is_known_by_the_names_a_file_binds_to_it():
    from normcheck.backends.triton.backend import signature

    text = ("import triton as tt\nfrom triton import jit as triton_jit\n"
            "from quack.autotuner import autotune\n\n@tt.jit\ndef a(X):\n    pass\n\n"
            "@triton_jit\ndef b(X):\n    pass\n\n@autotune(configs=[])\ndef c(X):\n    pass\n")
    assert signature(text, "a", "k.py").params == ("X",)
    assert signature(text, "b", "k.py").params == ("X",)
    with pytest.raises(Exception, match="name the kernel, not its Python wrapper"):
        signature(text, "c", "k.py")  # a project's own autotune is not Triton's


def test_the_other_formats_a_launcher_dispatches_are_rows_of_their_own(tmp_path):
    """#56 item 3: a kernel's `dtypes = { fp16 = "pass" }` is a row "name[fp16]" run on the same
    spec in that format, recorded on its own; a CUDA C kernel's other format is another
    instantiation, so its spec names each format's C++ type (`types`) and the entry's is
    swapped -- without them refused; a bad record is refused naming it."""
    c = corpus.load()
    rows = [k for k in c.kernels if k.dtype is not None]
    assert rows and all(k.name == f"{k.base}[{k.dtype}]" and k.spec.is_file() for k in rows)
    assert {k.language for k in rows} == {"cuda", "triton"}
    for k in rows:
        if k.language == "cuda":
            assert k.dtype in tomllib.loads(k.spec.read_text())["types"], k.name
    base = rows[0].base
    assert [k.name for k in c.select([base])][1:] == [k.name for k in rows if k.base == base]
    p = tmp_path / "corpus.toml"
    shutil.copy(corpus.CORPUS, p)
    k = rows[0]
    o = judge.Outcome(k.name, k.project, "v", k.language, "", k.expect, k.cause, k.why,
                      verdict="fail", cause="storage_sums")
    assert corpus.record([o], p) == [k.name]
    again = {x.name: x for x in corpus.load(p).kernels}[k.name]
    assert (again.expect, again.cause) == ("fail", "storage_sums")
    assert corpus.record([o], p) == []
    text = corpus.CORPUS.read_text()
    with_rows = {k.base for k in rows}
    cuda = next(x for x in c.kernels if x.language == "cuda" and x.dtype is None and
                x.name not in with_rows and "types" not in tomllib.loads(x.spec.read_text()))
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(f'name = "{cuda.name}"\n',
                                f'name = "{cuda.name}"\ndtypes = {{ fp32 = "pass" }}\n', 1))
    with pytest.raises(SpecError, match="another instantiation"):
        corpus.load(bad)
    bad.write_text(text.replace(f'dtypes = {{ {k.dtype} = ', f'dtypes = {{ fp64 = ', 1))
    with pytest.raises(SpecError, match="dtypes.fp64"):
        corpus.load(bad)


def test_a_cuda_specs_types_swap_the_entrys_type_for_another_format(tmp_path):
    """spec.for_dtype: vLLM's rms_norm_kernel<c10::BFloat16, 8, 2, true> as it instantiates for
    fp16 is <c10::Half, 8, 2, true>; a type not standing alone (c10::BFloat16x) is not touched; a
    format without a type, a types table without the spec's own format, or a type the entry
    does not name is refused naming it."""
    base = tomllib.loads((corpus.SPECS / "vllm_rms_norm.toml").read_text())
    data = {k: v for k, v in base.items() if k not in ("source", "include")}
    sp = specs.parse(data, "vllm")
    half = specs.for_dtype(sp, "fp16")
    assert half.entry == "vllm::rms_norm_kernel<c10::Half, 8, 2, true>" and half.dtype == "fp16"
    assert sp.entry == "vllm::rms_norm_kernel<c10::BFloat16, 8, 2, true>"  # not changed
    with pytest.raises(SpecError, match="types has no fp32"):
        specs.for_dtype(sp, "fp32")
    with pytest.raises(SpecError, match="the spec's own format bf16"):
        specs.parse({**data, "types": {"fp16": "c10::Half"}}, "vllm")
    with pytest.raises(SpecError, match="a type the entry"):
        specs.parse({**data, "types": {"bf16": "__nv_bfloat16", "fp16": "__half"}}, "vllm")
    with pytest.raises(SpecError, match="a C\\+\\+ type name"):
        specs.parse({**data, "types": {"bf16": "c10::BFloat16", "fp16": "x; int y"}}, "vllm")


def test_the_section_says_which_branch_of_each_launcher_its_spec_judges():
    """#56: the branch judged and the branches not -- each spec's header (read from the
    project's launcher) in the section, once per kernel (its format rows run the same spec)."""
    head = judge.spec_header(corpus.SPECS / "liger_rms_norm_block.toml")
    assert head.startswith("Liger-Kernel's block RMSNorm forward") and "32768" in head
    assert "#" not in head and "\n" not in head
    outs = [_outcome(name="k1", verdict="pass", judged="the per-row branch, up to 4096 columns"),
            _outcome(name="k1[fp16]", verdict="pass", judged="the per-row branch, up to 4096"),
            _outcome(name="k2", verdict="pass")]
    md = section.markdown([o.as_dict() for o in outs])
    part = md.split("What each spec judges")[1].split("Each kernel's families")[0]
    assert "- **k1**: the per-row branch, up to 4096 columns" in part
    assert "k1[fp16]" not in part and "k2" not in part
