"""The report: a sweep that resumes, strict results.json, rendered files, the audit."""

import json

import numpy as np

import pytest

from normcheck.report import run_report, sweep

PATTERN = "layernorm_*_fp16_upcast_square"


def test_killed_sweep_resumes_without_measuring_again(tmp_path, monkeypatch):
    out = tmp_path / "r"
    p = sweep.plan("quick", kernels_pattern=PATTERN)
    first = run_report("quick", backend="cpu", out=out, kernels=PATTERN, progress=False,
                       stop_after=7)
    assert not first["complete"]
    kept = json.loads((out / "results.json").read_text())  # valid JSON after the kill
    assert len(kept["records"]) == 7
    measured = []
    real = sweep.measure

    def counting(task, *a, **k):
        measured.append(task.key)
        return real(task, *a, **k)

    monkeypatch.setattr(sweep, "measure", counting)
    done = run_report("quick", backend="cpu", out=out, kernels=PATTERN, progress=False)
    assert done["complete"]
    assert len(measured) == len(p.tasks) - 7  # none of the 7 again
    assert not set(measured) & {r["key"] for r in kept["records"]}
    assert len(done["results"]["records"]) == len(p.tasks)


def test_a_file_cut_short_is_read_up_to_its_last_record(tmp_path):
    out = tmp_path / "r"
    run_report("quick", backend="cpu", out=out, kernels="rmsnorm_rms_fp32", progress=False,
               stop_after=3)
    path = out / "results.json"
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # a crash in the middle of a write
    data = sweep.load_results(out)
    assert 1 <= len(data["records"]) <= 3
    json.loads(path.read_text())  # repaired


def test_results_json_is_strict_and_complete(tmp_path):
    out = tmp_path / "r"
    done = run_report("quick", backend="cpu", out=out, kernels="layernorm_naive_*",
                      progress=False)
    text = (out / "results.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    data = json.loads(text)
    prov = data["provenance"]
    for k in ("normcheck", "git_commit", "backend", "compiler", "flags", "fmad", "cpu", "python",
              "numpy", "mpmath", "hypothesis", "seed", "date"):
        assert k in prov
    rec = data["records"][0]
    for k in ("kernel", "norm", "algorithm", "storage", "order", "convention", "family", "cols",
              "rows", "max_ulp", "p99_ulp", "mean_ulp", "worst", "nonfinite"):
        assert k in rec
    assert (out / rec["worst"]["file"]).is_file()
    assert any(r["max_ulp"] == "inf" for r in data["records"])  # naive fp32 on offsets
    for name in ("report.md", "index.html", "conditioning.png", "fp16_overflow_map.png",
                 "histograms.png", "dgamma_rows.png", "backward.json"):
        assert (out / name).is_file(), name
    html = (out / "index.html").read_text()
    assert html.count("data:image/png;base64,") == 4
    assert "## Backward" in (out / "report.md").read_text()
    assert "The seed articles, measured" in (out / "report.md").read_text()
    verdicts = {a["claim"][:30]: a["verdict"] for a in done["results"]["audit"]}
    assert "false" in verdicts.values() and "true" in verdicts.values()


def test_a_rerun_with_another_seed_refuses_the_folder(tmp_path):
    from normcheck.errors import InvalidArgument

    out = tmp_path / "r"
    run_report("quick", backend="cpu", out=out, kernels="rmsnorm_rms_fp32", progress=False,
               stop_after=1)
    with pytest.raises(InvalidArgument, match="seed"):
        run_report("quick", backend="cpu", out=out, kernels="rmsnorm_rms_fp32", seed=3,
                   progress=False)


def test_bad_pattern():
    from normcheck.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="--kernels='nope\\*'"):
        sweep.plan("quick", kernels_pattern="nope*")


def test_audit_verdicts_follow_their_measurements(monkeypatch):
    """No verdict is written into the code: change a measurement and the verdict follows."""
    from normcheck.report import audit

    assert audit.fp16_square("cpu")["verdict"] == "true"
    real = audit._max_ulp
    # a world in which square-then-upcast were accurate: the claim no longer holds
    monkeypatch.setattr(audit, "_max_ulp", lambda *a, **k: 0.5)
    assert audit.fp16_square("cpu")["verdict"] != "true"
    assert audit.naive_variance("cpu")["verdict"] == "false"
    monkeypatch.setattr(audit, "_max_ulp", real)
    monkeypatch.setattr(audit.bounds, "within_bound", lambda ref, y, E: np.zeros(y.shape, bool))
    assert audit.two_launches("cpu")["verdict"] == "pending"
    for a in audit.run_audit([], "cpu"):
        assert "Verdict rule" in a["evidence"] or a["verdict"] == "pending", a["claim"]


def test_a_cluster_run_equals_the_local_run(tmp_path):
    """`report --cluster local:2` (a Dask cluster of two worker processes) writes the same
    records as a local run with the same seed (all but the timing), and resumes the same way."""
    import subprocess
    import sys

    pytest.importorskip("distributed")
    pattern = "rmsnorm_rms_fp16*"

    def run(out, *extra):
        r = subprocess.run([sys.executable, "-m", "normcheck", "report", "--quick", "--backend",
                            "cpu", "--kernels", pattern, "--seed", "3", "--out", str(out),
                            *extra], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return {rec.key: {k: v for k, v in rec.to_json().items() if k != "seconds"}
                for rec in sweep.load_results(out)["records"]}

    local = run(tmp_path / "local")
    # a cluster run that starts from half the records, as after a kill: it measures the rest
    half = tmp_path / "cluster"
    run_report("quick", backend="cpu", out=half, kernels=pattern, seed=3, progress=False,
               stop_after=len(local) // 2)
    clustered = run(half, "--cluster", "local:2")
    assert clustered.keys() == local.keys()
    assert json.dumps(clustered, sort_keys=True) == json.dumps(local, sort_keys=True)
    assert sorted(p.name for p in (half / "worst").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local" / "worst").iterdir())


def test_a_record_owns_its_json_round_trip():
    """Record.to_json / from_json: a record measured by the sweep comes back equal, through the
    file's own JSON (inf as "inf"); a field of the wrong type is named."""
    import math

    from normcheck.report import folder
    from normcheck.report.record import Record, RecordError

    p = sweep.plan("quick", kernels_pattern="layernorm_naive_fp32")
    task = next(t for t in p.tasks if t.family == "offset" and not t.param)
    rec, _case = sweep.measure(task, 0, "cpu")
    assert isinstance(rec, Record) and rec.kernel == "layernorm_naive_fp32"
    back = Record.from_json(folder.restore(json.loads(folder.json_text(rec.to_json()))))
    # equal field by field, NaN included (the offset row's worst kernel value is NaN)
    assert folder.json_text(back.to_json()) == folder.json_text(rec.to_json())
    assert back.max_ulp == math.inf and math.isnan(back.worst["kernel"])
    bad = {**rec.to_json(), "cols": "12"}
    with pytest.raises(RecordError, match="cols='12' is not of its type"):
        Record.from_json(bad)
    with pytest.raises(RecordError, match="unknown field 'colz'"):
        Record.from_json({**rec.to_json(), "colz": 1})
    with pytest.raises(RecordError, match="no 'max_ulp'"):
        Record.from_json({k: v for k, v in rec.to_json().items() if k != "max_ulp"})
