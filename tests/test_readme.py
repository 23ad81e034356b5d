"""The README's commands as they now read (scripts/readme_commands.py: CI runs them all on a
fresh clone): the main job -- `normcheck report --quick --backend cpu` -- runs its whole sweep,
backward and quantised sections included, with and without Triton, with a kernel of the user's
beside the built-ins (it once crashed after the sweep, and no test ran it whole)."""

import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import readme_commands  # noqa: E402

README = (ROOT / "README.md").read_text()

#: The main job without Triton: every import of it fails as where it is not installed.
_NO_TRITON = """import importlib.abc, sys
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Hide())
from normcheck.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_readme_starts_with_the_main_job_and_the_tests():
    job, tests = readme_commands.setup_commands(README)
    assert "normcheck report --quick --backend cpu --out " in job.text
    assert ("reports/quick/report.md", "file") in job.files
    assert "pytest" in tests.text


def test_every_file_a_readme_command_names_exists():
    """A command that names cuda_src/... names a file that is there (the docs run as written)."""
    for c in readme_commands.doc_commands(README):
        for word in shlex.split(c.text):
            if word.startswith("cuda_src/"):
                assert (ROOT / word).is_file(), f"README.md:{c.line}: {word}"


def test_every_normcheck_command_runs_as_a_newcomer_types_it():
    """Both set-up commands leave normcheck in .venv/bin: a command that says `normcheck ...`
    comes after the README's `source .venv/bin/activate` (the runner holds it for the lines
    after it, as a shell does), or names .venv/bin/normcheck (`bash: normcheck: command not
    found` was a newcomer's first line)."""
    active = False
    for c in readme_commands.doc_commands(README):
        if readme_commands.ACTIVATE.match(c.text):
            active = True
        elif not c.skip and c.text.split()[0] == "normcheck":
            assert active, f"README.md:{c.line}: {c.text} before `source .venv/bin/activate`"
    assert active


def test_an_activated_environment_holds_for_the_lines_after_it(tmp_path):
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text(f'export PATH="{venv / "bin"}:$PATH"\n')
    tool = venv / "bin" / "nc-probe"
    tool.write_text("#!/bin/sh\necho probed\n")
    tool.chmod(0o755)
    cmds = readme_commands.doc_commands(
        "```sh\na\n```\n```sh\nb\n```\n```sh\nnc-probe   # (exit 127)\n"
        f"source {venv}/bin/activate\nnc-probe > out.txt\n```\n")
    said = []
    assert readme_commands.run(cmds, tmp_path, echo=said.append), said
    assert (tmp_path / "out.txt").read_text() == "probed\n"


def test_the_reader_takes_exit_codes_and_promised_files_from_the_commands():
    text = ("```sh\npython3 -m venv v && v/bin/normcheck report --quick --out r\n```\n"
            "```sh\npytest\n```\n```sh\n# a note\npip install torch\n"
            "normcheck check a.toml \\\n  --json > v.json   # fails: (exit 1)\n"
            "normcheck check x.cu --backend cuda\n```\n")
    job, _tests = readme_commands.setup_commands(text)
    assert job.files == [("r/report.md", "file"), ("r/index.html", "file")]
    pip, chk, gpu = readme_commands.doc_commands(text)
    assert pip.skip and gpu.skip == "needs a GPU" and chk.skip is None
    assert chk.text == "normcheck check a.toml --json > v.json" and chk.exit_code == 1
    assert chk.files == [("v.json", "json")] and chk.line == 10


def _main_job_args(out):
    """The README's first command's normcheck part, its --out moved under ``out``."""
    job, _ = readme_commands.setup_commands(README)
    words = shlex.split(job.text.split("normcheck ", 1)[1].split("&&")[0])
    i = words.index("--out")
    return words[:i + 1] + [str(out)] + words[i + 2:]


@pytest.mark.slow
@pytest.mark.parametrize("triton", [True, False], ids=["with-triton", "without-triton"])
def test_the_main_job_runs_whole_with_a_kernel_of_the_users(triton, tmp_path):
    if triton and importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed (pip install 'normcheck[triton]')")
    out = tmp_path / "quick"
    spec = ROOT / "cuda_src" / "examples" / ("triton/liger_rms_norm.toml" if triton
                                               else "vllm_rms_norm.toml")
    argv = _main_job_args(out) + ["--spec", str(spec)]
    cmd = [sys.executable, "-m", "normcheck", *argv] if triton else \
        [sys.executable, "-c", _NO_TRITON, *argv]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("report.md", "index.html", "summary.md", "results.json", "backward.json",
                 "quantised.json"):
        assert (out / name).stat().st_size > 0, name
    md = (out / "report.md").read_text()
    assert f"(yours: {spec.name})" in md
    for section in ("## Backward", "## Quantised outputs"):
        assert section in md, section
    quant = json.loads((out / "quantised.json").read_text())
    assert quant["builtins"] and quant["matrix"] and quant["saturation"]
    assert {d["contract"] for d in quant["matrix"]} >= {"vllm", "trtllm"}
    from normcheck.report.sweep import load_results

    names = {r.kernel for r in load_results(out)["records"]}
    assert any(n.startswith("triton_") for n in names) == triton
    assert any(n.startswith("rmsnorm_rms_") for n in names)
