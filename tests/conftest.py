import os

pytest_plugins = ["pytester"]

# Triton's @triton.jit decorations obey TRITON_INTERPRET when they run: set before anything in
# the test process can import Triton (torch may), so normcheck's executor (which interprets)
# can be imported in any order.  The GPU test of Triton runs its checks in a subprocess without it.
os.environ["TRITON_INTERPRET"] = "1"


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _a_folder_of_its_own(tmp_path_factory, monkeypatch):
    """Every test runs in an empty temporary folder: what a check writes in the working folder
    (./.normcheck/: counterexamples, the search's files) never lands in the checkout, where the
    user's `normcheck replay` ("the newest saved case") would find a test's case."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
