"""The property suite's fixtures and Hypothesis profiles (its helpers: prop_support.py).

Profiles: ``ci`` (the default: few examples, derandomized, so the whole suite runs in a few
minutes on 2 cores and a failure reproduces) and ``thorough`` (hundreds of examples per
property, random).  Pick one with ``--hypothesis-profile thorough`` or NORMCHECK_PROFILE.
Kernels run on the backend of ``--normcheck-backend`` (default cpu).
"""

import os

import pytest
from hypothesis import HealthCheck, settings

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
         HealthCheck.large_base_example]
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True, database=None,
                          suppress_health_check=_SLOW, print_blob=True)
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=_SLOW, print_blob=True)
settings.load_profile(os.environ.get("NORMCHECK_PROFILE", "ci"))


@pytest.fixture(scope="session")
def backend(normcheck_backend_name):
    return normcheck_backend_name


@pytest.fixture(autouse=True)
def _a_folder_of_its_own(tmp_path_factory, monkeypatch):
    """Every property runs in an empty temporary folder (what a failing check saves in
    ./.normcheck/ never lands in the checkout)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
