"""pytest plugin (entry point ``normcheck``): the ``gpu`` marker and ``--normcheck-backend``.

Loaded in every pytest run of an environment where normcheck is installed, so it imports nothing
heavy at module level."""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption", "pytest_configure", "normcheck_backend"]


def pytest_addoption(parser):
    group = parser.getgroup("normcheck")
    group.addoption("--normcheck-backend", default="cpu", choices=("cpu", "cuda", "auto"),
                    help="backend the normcheck fixtures and properties run kernels on")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU and PyCUDA; skipped without")


@pytest.fixture
def normcheck_backend(request) -> str:
    """The backend name chosen with --normcheck-backend (default cpu)."""
    return request.config.getoption("--normcheck-backend")
