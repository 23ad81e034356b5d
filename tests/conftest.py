import os

pytest_plugins = ["pytester"]

# Triton's @triton.jit decorations obey TRITON_INTERPRET when they run: set before anything in
# the test process can import Triton (torch may), so normcheck's executor (which interprets)
# can be imported in any order.  The GPU test of Triton runs its checks in a subprocess without it.
os.environ["TRITON_INTERPRET"] = "1"
