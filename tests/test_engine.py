"""The one check engine (#33): a kind of check is one judge of check.engine.Judge, run by
check.engine.run_families and finished by check.engine.assemble -- shown here by a fourth kind
written in a few lines (a toy: an elementwise square root judged exactly), and the rules every
kind gets from the loop rather than from its own copy."""

import numpy as np

from normcheck import norms
from normcheck.check import engine
from normcheck.check.backward import BackwardJudge
from normcheck.check.judge import ForwardJudge
from normcheck.check.quantised import QuantisedJudge
from normcheck.check.tolerances import TOLERANCES, Verdict
from normcheck.errors import KernelTimeout
from normcheck.launch import Case
from normcheck.quant import contract as qcontract


class SqrtJudge(engine.Judge):
    """A fourth kind of check: y = sqrt(x) in float32, correctly rounded or it fails."""

    def __init__(self, target):
        super().__init__(target)
        self.launches = 0

    def plan(self, family, examples):
        return [(engine.odd_rows(examples), cols) for cols in (3, 8)]

    def step(self, st, fi, k, rows, cols):
        x = np.random.default_rng([fi, k]).random((rows, cols)).astype(np.float32)
        case = Case(x=x)
        self.launches += 1
        outs = self.run_target(st.fr.family, case)
        if isinstance(outs, engine.Failure):
            return case, None, [outs]
        want = np.sqrt(x.astype(np.float64)).astype(np.float32)
        bad = outs["output"] != want
        fails = [engine.Failure("accuracy", st.fr.family, f"{int(bad.sum())} wrong")] \
            if bad.any() else []
        return case, outs, fails

    def finish(self, st):
        return st.fails, []


def _run(fn, fams=("a", "b")):
    judge = SqrtJudge(fn)
    res, fails, warns = engine.run_families(judge, list(fams), 4)
    r = engine.assemble(engine.Findings(
        kernel="sqrt", norm=norms.get("rmsnorm"), dtype="fp32", out_dtype="fp32",
        backend="cpu", failures=fails, warnings=warns, families=res,
        tolerance=TOLERANCES["fp32"], t0=0.0, max_ulp=0.0))
    return judge, res, r


def test_a_fourth_kind_of_check_is_one_judge():
    def good(case, guard=None):
        return {"output": np.sqrt(case.x)}

    judge, res, r = _run(good)
    assert r.verdict == "pass" and [fr.rows for fr in res] == [3 + 3, 3 + 3]  # odd rows a case

    def off(case, guard=None):
        return {"output": np.nextafter(np.sqrt(case.x), np.float32(2))}

    judge, res, r = _run(off)
    # the loop counted each family's failures and failed it (no judge of its own does that)
    assert r.verdict == "fail" and all(fr.verdict is Verdict.FAIL for fr in res)
    assert [fr.failures for fr in res] == [{"accuracy": 2}, {"accuracy": 2}]  # each case
    assert len(r.failures) == 2  # one per kind and family, deduplicated by assemble


def test_a_kernel_that_hung_is_not_launched_again_and_its_launch_is_kept():
    def hangs(case, guard=None):
        raise KernelTimeout("sqrt: did not finish in 1 s", kind="timeout")

    judge, res, r = _run(hangs)
    assert judge.launches == 1 and judge.timed_out  # family b never launched it
    assert judge.fault is not None and judge.fault[0] == "a"  # what a replay runs again
    assert r.verdict == "fail" and r.failures[0].kind == "timeout"


def test_every_judge_plans_odd_row_counts():
    """One rule of rows (engine.odd_rows: a partial last tile), in each kind's plan -- the
    quantised check once re-inlined its own copy."""
    fwd = ForwardJudge(None, engine.Setup(norm=norms.get("rmsnorm"), fmt="fp32"))
    q = QuantisedJudge(None, engine.Setup(norm="rmsnorm", fmt="bf16",
                                          contract=qcontract.preset("vllm", "per_token")))
    from normcheck import families

    plans = [fwd.plan(f, 8) for f in ("gaussian", "offset")] + \
        [q.plan(f, 8) for f in ("gaussian", "outlier")]
    bj = BackwardJudge.__new__(BackwardJudge)  # its plan reads the spec's width contract only
    bj.lo, bj.hi, bj.multiple = 1, 8192, 1
    plans += [bj.plan(f, 8) for f in families.BACKWARD_FAMILIES]
    rows = [r for p in plans for r, _ in p]
    assert rows and all(r % 2 == 1 for r in rows), rows


def test_a_fourth_kind_is_one_class_registered(monkeypatch):
    """Kinds of check are dispatched through normcheck.check.kinds (#46): a class registered
    there is reached by the API with nothing else edited -- here one claiming every forward
    check ahead of the built-in kinds, judging its target with the toy judge above."""
    from normcheck import check
    from normcheck.check import kinds

    monkeypatch.setattr(kinds, "KINDS", list(kinds.KINDS))
    before = [k.name for k in kinds.KINDS]
    assert before[:3] == ["backward", "quantised", "forward"]  # by precedence

    @kinds.register
    class Sqrt(kinds.Kind):
        name, precedence = "sqrt", 0

        @staticmethod
        def claims(backward, contract):
            return not backward and contract is None

        def judge(self, target, setup, runs):
            def sqrt(case, guard=None):
                return {"output": np.sqrt(case.x)}

            judge = SqrtJudge(sqrt)
            res, fails, warns = engine.run_families(judge, ["a"], runs.examples)
            return engine.assemble(engine.Findings(
                kernel="sqrt", norm=setup.norm, dtype="fp32", out_dtype="fp32",
                backend="cpu", failures=fails, warnings=warns, families=res,
                tolerance=TOLERANCES["fp32"], t0=0.0, max_ulp=0.0))

    r = check.check_callable(lambda x, g, b, eps: x, "rmsnorm", "fp32", examples=4, search=0)
    assert r.kernel == "sqrt" and r.verdict == "pass"  # the identity would have failed
    assert isinstance(kinds.of(True, None), check.backward.Backward)
