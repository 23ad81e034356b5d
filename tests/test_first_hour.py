"""A kernel author's first hour: the default signatures said where they are looked for, a spec
skeleton from the kernel's own parameters, argument-order mistakes named with the fix, one
line of definitions instead of a paragraph, help for every option, no litter, and the report
that puts the user's kernels first."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from normcheck import errors, check, skeleton, spec as specs
from normcheck.kernels import CUDA_SRC

HERE = Path(__file__).parent


def _cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "normcheck", *argv], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


SWAPPED = """#include <cuda_fp16.h>
extern "C" __global__ void swapped(const __half* x, __half* y, const __half* g, float eps,
                                   int rows, int cols) {}
extern "C" __global__ void eps_last(__half* y, const __half* x, const __half* g, int rows,
                                    int cols, float eps) {}
"""


@pytest.mark.parametrize("entry, says", [
    ("swapped", "parameter 0 is `const __half* x`; the default ABI has the output y (T*) "
                "there (the kernel declares it const: x and y swapped?)"),
    ("eps_last", "parameter 3 is `int rows`; the default ABI has float eps there"),
])
def test_argument_order_mistakes_are_named_with_the_fix(tmp_path, entry, says):
    src = tmp_path / "k.cu"
    src.write_text(SWAPPED)
    with pytest.raises(errors.InvalidArgument) as e:
        check.check_kernel(src, entry, "rmsnorm", "fp16", search=0, examples=4)
    assert says in str(e.value) and "normcheck spec FILE --entry NAME" in str(e.value)


def test_the_skeleton_guesses_roles_from_names_and_types():
    out = _cli("spec", str(CUDA_SRC / "examples" / "vllm_rms_norm.cu"), "--entry",
               "rms_norm_kernel<__half>")
    assert out.returncode == 0, out.stderr
    sp = specs.parse(__import__("tomllib").loads(out.stdout))
    assert [a.role for a in sp.args] == ["output", "input", "stride", "gamma", "eps", "rows",
                                         "cols"]
    assert sp.args[2].type == "int64" and sp.norm == "rmsnorm" and sp.dtype == "fp16"
    assert "guessed" in out.stderr and "# __half* out: named 'out'" in out.stdout


def test_a_written_spec_names_its_source_from_where_it_lands(tmp_path):
    """`normcheck spec FILE --entry E > my.toml` wrote source = "k.cu", which the check then
    refused (the path is the spec's folder's): printed, the source is named relative to the
    current folder; with -o FILE, relative to FILE's folder -- and either spec loads."""
    (tmp_path / ".git").mkdir()  # a repository: a spec may name any file beneath it
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text(
        'extern "C" __global__ void rms(float* y, const float* x, const float* weight, '
        'float eps, int rows, int cols) {}\n')
    out = _cli("spec", "csrc/k.cu", "--entry", "rms", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert 'source = "csrc/k.cu"' in out.stdout
    (tmp_path / "my.toml").write_text(out.stdout)
    assert specs.load(tmp_path / "my.toml").source == tmp_path / "csrc" / "k.cu"
    out = _cli("spec", "csrc/k.cu", "--entry", "rms", "-o", "specs/k.toml", cwd=tmp_path)
    assert out.returncode == 0 and not out.stdout, out.stderr
    written = tmp_path / "specs" / "k.toml"
    assert 'source = "../csrc/k.cu"' in written.read_text() and "wrote specs/k.toml" in out.stderr
    assert specs.load(written).source == tmp_path / "csrc" / "k.cu"


def test_a_wrong_entry_lists_the_files_kernels_before_any_compile(tmp_path):
    (tmp_path / "k.cu").write_text(
        '#define RMS(NAME) extern "C" __global__ void NAME(float* y) {}\nRMS(rms_fp32)\n'
        'template <int N> __global__ void __launch_bounds__(256) ln_kernel(float* y) {}\n')
    out = _cli("check", "k.cu", "--entry", "rms_fp23", "--norm", "rmsnorm", "--dtype", "fp32",
               cwd=tmp_path)
    assert out.returncode == 2
    err = out.stderr.strip().splitlines()[-1]
    assert "entry 'rms_fp23' is not a kernel of" in err and "did you mean 'rms_fp32'?" in err
    assert "its kernels: rms_fp32, ln_kernel" in err, err
    assert "g++ could not compile" not in out.stderr and "<normcheck launch" not in out.stderr


def test_a_mistyped_flag_is_told_first_with_the_flag_it_resembles():
    # the error and the fix in the first line, then where the options are: not 16 lines of
    # usage before the did-you-mean (#64)
    out = _cli("check", "k.cu", "--dtpye", "fp16")
    assert out.returncode == 2
    first, *rest = out.stderr.splitlines()
    assert first == ("normcheck check: error: unrecognized arguments: --dtpye (did you mean "
                     "--dtype?) fp16"), out.stderr
    assert rest == ["(normcheck check --help lists its options)"]
    out = _cli("chek")
    assert out.returncode == 2 and "did you mean 'check'?" in out.stderr


def test_parameter_names_are_read_from_the_source():
    text = ('template <typename T, int N>\n__global__ void k(T* __restrict__ y, const T* x, '
            'const float* /*unused*/, float eps = 1e-5f, int64_t ld) {}\n')
    assert skeleton.parameter_names(text, "k<__half, 8>") == ["y", "x", "", "eps", "ld"]
    assert skeleton.parameter_names(text, "other") is None


def test_one_line_of_definitions_and_explain(tmp_path):
    out = _cli("check", str(HERE / "cuda" / "check" / "kernels.cu"), "--entry", "rms_good_fp16",
               "--norm", "rmsnorm", "--dtype", "fp16", "--search", "0", "--examples", "4",
               cwd=tmp_path)
    head = out.stdout.splitlines()[:3]
    assert out.returncode == 0 and "--explain" in head[1] and len(head[1]) < 200, head
    assert not any(ln.startswith("warn: within that bound") for ln in out.stdout.splitlines())
    table = next(ln for ln in out.stdout.splitlines() if ln.startswith("family"))
    assert table.split()[:5] == ["family", "rows", "cols", "verdict", "x"]  # yardstick first
    ex = _cli("check", "--explain")
    assert ex.returncode == 0 and "fail -- only what no sound kernel would do" in ex.stdout
    assert "rounding bias" in ex.stdout


def test_every_check_option_has_help_and_the_default_abi_is_in_it():
    out = _cli("check", "--help").stdout
    for opt in ("--norm", "--dtype", "--backend", "--seed", "--examples", "--explain"):
        i = out.index(opt)
        assert len(out[i:i + 200].split("\n")[0].split(opt, 1)[1].strip()) > 3 or \
            out[i:i + 200].split("\n")[1].strip(), opt
    assert "(T* y, const T* x, const T* gamma, float eps, int rows, int cols)" in out


def test_normcheck_without_a_command_is_a_usage_error():
    out = _cli()
    assert out.returncode == 2 and "usage:" in out.stderr


def test_a_check_leaves_one_folder_with_its_gitignore_and_clean_removes_it(tmp_path):
    out = _cli("check", str(HERE / "cuda" / "check" / "kernels.cu"), "--entry",
               "rms_rstd_in_fp16", "--norm", "rmsnorm", "--dtype", "fp16", "--search", "5",
               "--examples", "4", cwd=tmp_path)
    assert out.returncode == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".normcheck"]
    assert (tmp_path / ".normcheck" / ".gitignore").read_text().strip().endswith("*")
    assert list((tmp_path / ".normcheck").glob("counterexample-*.npz"))
    c = _cli("clean", cwd=tmp_path)
    assert c.returncode == 0 and "removed .normcheck/" in c.stdout
    assert not (tmp_path / ".normcheck").exists()


def test_the_suite_writes_nothing_in_the_checkout():
    """Tests run in a temporary folder (conftest.py): a test's counterexamples never land in the
    checkout's .normcheck/, where `normcheck replay` would take one for the user's newest."""
    root = Path(__file__).resolve().parent.parent
    assert root not in Path.cwd().resolve().parents and Path.cwd().resolve() != root
    assert not any(Path.cwd().iterdir())


def test_counterexamples_are_capped(tmp_path, monkeypatch):
    import numpy as np

    from normcheck import cases

    monkeypatch.chdir(tmp_path)
    for i in range(cases.KEEP + 5):
        p = cases.save_case(kernel={"variant": "x"}, x=np.ones((1, 2), np.float32),
                            label=f"k{i}")
        os.utime(p, (i, i))
    assert len(list(Path(".normcheck").glob("counterexample-*.npz"))) == cases.KEEP


def test_warps_that_return_before_a_barrier_pass_with_a_note(tmp_path):
    src = tmp_path / "d.cu"
    src.write_text("""
extern "C" __global__ void rms(float* y, const float* x, const float* g, float eps, int rows,
                               int cols) {
  __shared__ float s;
  if (threadIdx.x >= 32) {  // the last warps leave before the barrier
    return;
  }
  if (threadIdx.x == 0) {
    float a = 0.f;
    for (int j = 0; j < cols; ++j) a += x[(size_t)blockIdx.x * cols + j] * x[(size_t)blockIdx.x * cols + j];
    s = rsqrtf(a / cols + eps);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < cols; j += 32)
    y[(size_t)blockIdx.x * cols + j] = x[(size_t)blockIdx.x * cols + j] * s * g[j];
}
""")
    r = check.check_kernel(src, "rms", "rmsnorm", "fp32", search=0, examples=4)
    # the warps that return touch nothing the barrier orders: since Volta a barrier waits only
    # for threads that have not exited -- sound on sm_90, said with the verdict (#64: it failed
    # as a divergent barrier; #54 had made it one)
    assert r.verdict in ("pass", "warn") and not r.failures, r.render()  # one thread sums: warn
    assert any("d.cu:13" in n and "reached only by the threads of its block that had not "
               "exited" in n
               for n in r.detail.notes), r.detail.notes


@pytest.fixture(scope="module")
def user_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "r"
    ex = CUDA_SRC / "examples"
    r = _cli("report", "--quick", "--backend", "cpu", "--kernels", "rmsnorm_rms_fp16_up*",
             "--spec", str(ex / "vllm_rms_norm.toml"), "--spec", str(ex / "flashinfer_rms_norm.toml"),
             "--out", str(out), "--strict", "--github")
    return r, out


def test_the_report_puts_the_users_kernels_first_named_by_spec(user_report):
    r, out = user_report
    md = (out / "report.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| rmsnorm | fp16 |")]
    assert rows and "(yours: " in rows[0] and "(yours: " in rows[1], rows[:3]
    assert "vllm_rms_norm.toml" in md and "flashinfer_rms_norm.toml" in md
    assert "**sandbox**" in md and "sha256" in md  # provenance: the sandbox and the specs
    html = (out / "index.html").read_text()
    assert 'class="user"' in html and "your kernels" in html


def test_report_strict_exits_1_on_an_unsafe_kernel_of_yours_and_annotates_it(user_report):
    r, out = user_report
    assert r.returncode == 1, r.stderr[-2000:]
    assert "unsafe kernels of yours: rms_norm_kernel<__half>" in r.stdout
    ann = [ln for ln in r.stdout.splitlines() if ln.startswith("::error ")]
    assert len(ann) == 1 and "vllm_rms_norm.toml,line=1" in ann[0] and "{dir}" not in ann[0]


def test_check_github_annotations_point_at_the_faulting_line(tmp_path):
    src = HERE / "cuda" / "faults" / "oob.cu"
    r = _cli("check", str(src), "--entry", "last_row_past_end", "--norm", "rmsnorm", "--dtype",
             "fp32", "--search", "0", "--examples", "4", "--github", cwd=tmp_path)
    ann = [ln for ln in r.stdout.splitlines() if ln.startswith("::error ")]
    line = next(i for i, ln in enumerate(src.read_text().splitlines(), 1)
                if "OOB: last_row_past_end" in ln)
    assert ann and all(f"oob.cu,line={line}," in a for a in ann), ann[:2]


def test_a_specd_checks_annotations_point_at_the_finding_in_the_spec_source(tmp_path):
    """A check from a spec: each ::error at the finding's file and line (ggml's 32-bit row
    offset at ggml_norm.cu:19), the kernel's line where the finding has none (#64: no file=
    or line= at all)."""
    spec = CUDA_SRC / "examples" / "ggml_norm.toml"
    r = _cli("check", str(spec), "--search", "0", "--examples", "4", "--github", cwd=tmp_path)
    ann = [ln for ln in r.stdout.splitlines() if ln.startswith(("::error ", "::warning "))]
    assert ann and all("file=" in a and "ggml_norm.cu,line=" in a for a in ann), ann
    src = (CUDA_SRC / "examples" / "ggml_norm.cu").read_text().splitlines()
    oob = next(a for a in ann if "out_of_bounds" in a)
    line = int(oob.split("line=")[1].split(",")[0])
    assert "row*ncols" in src[line - 1].replace(" ", "") or "ncols" in src[line - 1], \
        (line, src[line - 1])
