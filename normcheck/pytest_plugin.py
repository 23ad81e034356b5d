"""pytest plugin (entry point ``normcheck``): what a user's own test suite gets from normcheck.

* ``--normcheck-backend {cpu,cuda,auto}`` and the ``normcheck_backend`` fixture (a backend
  object);
* the ``gpu`` marker: tests marked with it are skipped, with the reason, where no GPU is usable;
* the strategies, as ``from normcheck.strategies import rows, row_cases``;
* :func:`assert_accurate`: assert that a kernel (a .cu file, with or without a spec) or a Python
  callable passes ``normcheck check``; a failure raises AssertionError with one line -- the
  verdict, the first failure's family and worst element, the cause, how to replay it -- and,
  under ``pytest -v``, the whole report.

Loaded in every pytest run of an environment where normcheck is installed, so it imports nothing
heavy until a test asks for it."""

from __future__ import annotations

import pytest

from normcheck import escape

__all__ = ["pytest_addoption", "pytest_configure", "pytest_collection_modifyitems",
           "normcheck_backend", "normcheck_backend_name", "assert_accurate", "failure_message"]


def pytest_addoption(parser):
    group = parser.getgroup("normcheck")
    group.addoption("--normcheck-backend", default="cpu", choices=("cpu", "cuda", "auto"),
                    help="backend the normcheck fixtures and properties run kernels on "
                         "(default cpu)")


_CONFIG = []  # the session's pytest config (for -v in assert_accurate's message)


def pytest_configure(config):
    config.addinivalue_line("markers",
                            "gpu: needs an NVIDIA GPU and PyCUDA; skipped where there is none")
    _CONFIG[:] = [config]


_gpu_reason = None


def _gpu_unavailable() -> str | None:
    """Why no GPU is usable here (None if one is)."""
    global _gpu_reason
    if _gpu_reason is None:
        from normcheck.backends import cuda

        _gpu_reason = cuda.unavailable_reason() or ""
    return _gpu_reason or None


def pytest_collection_modifyitems(config, items):
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    reason = _gpu_unavailable()
    if reason:
        skip = pytest.mark.skip(reason=f"gpu test: {reason}")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def normcheck_backend_name(request) -> str:
    """The backend name chosen with --normcheck-backend (default cpu)."""
    return request.config.getoption("--normcheck-backend")


@pytest.fixture(scope="session")
def normcheck_backend(normcheck_backend_name):
    """The backend object chosen with --normcheck-backend."""
    from normcheck.backends import get_backend

    return get_backend(normcheck_backend_name)


def assert_accurate(target, *, norm=None, dtype=None, strict=False, **kwargs):
    """Assert that ``target`` passes ``normcheck check``; returns the CheckResult.

    ``target`` is a path to a .cu file (``entry=``, ``spec=`` and the other keywords of
    :func:`normcheck.check.check_kernel`), a KernelSpec or spec path given as ``spec=`` with
    ``target=None``, or a Python callable (keywords of :func:`normcheck.check.check_callable`).
    A fail raises AssertionError with the check's report; ``strict=True`` fails on warn too::

        from normcheck.pytest_plugin import assert_accurate

        def test_my_rmsnorm():
            assert_accurate("kernels/rmsnorm.cu", entry="rms_norm<__half>", norm="rmsnorm",
                            dtype="fp16")
    """
    __tracebackhide__ = True  # pytest shows the assertion, not this function's source
    from normcheck import check

    if callable(target) and not isinstance(target, (str, bytes)):
        result = check.check_callable(target, norm, dtype, **kwargs)
    else:
        result = check.check_kernel(target, norm=norm, dtype=dtype, **kwargs)
    if result.exit_code(strict=strict):
        raise AssertionError(failure_message(result, verbose=_verbose()))
    return result


def failure_message(result, verbose: bool = False) -> str:
    """One line (verdict, family, worst element, cause, replay); the whole report with
    ``verbose`` (pytest -v)."""
    first = (result.failures or result.warnings or [None])[0]
    parts = [f"normcheck: {result.kernel} {result.verdict.upper()}"]
    if first is not None:
        parts.append(f"[{first.kind}] {first.family}: {first.detail.split('; the launch')[0]}")
    if result.cause and result.verdict != "pass":  # the CLI's verdict line's words (#64)
        parts.append(f"likely cause: {result.cause}")
    if result.counterexample:
        from normcheck import cases

        parts.append(f"replay: {cases.command(result.counterexample)}")
    line = escape.terminal(" -- ".join(parts))  # a kernel's text reaches pytest's terminal
    if verbose:
        return line + "\n" + escape.terminal(result.render())
    return line + " (pytest -v for the whole report)"


def _verbose() -> bool:
    cfg = _CONFIG[0] if _CONFIG else None
    try:
        return cfg is not None and cfg.getoption("verbose") > 0
    except (ValueError, AttributeError):
        return False
