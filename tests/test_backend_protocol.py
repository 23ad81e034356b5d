"""Every backend's kernels take one call (normcheck.backends.base.Kernel), and a backend says what
it can do (Capabilities) rather than being asked its name (#33)."""

import inspect

import pytest

from normcheck import errors
from normcheck.backends import backend_class, base
from normcheck.backends.cpu.backend import CpuKernel
from normcheck.backends.cuda import CudaKernel


def test_both_backends_kernels_take_the_one_call():
    want = inspect.signature(base.Kernel.__call__)
    for cls in (CpuKernel, CudaKernel):
        assert issubclass(cls, base.Kernel)
        assert inspect.signature(cls.__call__) == want, cls


def test_a_launch_option_a_backend_lacks_is_refused_by_name():
    class Plain(base.Kernel):  # a backend with no launch options beyond the grid
        def __call__(self, grid, block, args, shared_mem=0, *, names=None, timeout=None,
                     guard=None, schedule=None, workers=None, seed=0, fill=0xFF, blocks=None,
                     hazards=False, max_dyn_smem=0):
            self.refuse(schedule, workers, seed, fill, blocks, hazards)

    k = Plain()
    k((1,), (1,), [])
    for kw, name in (({"fill": 0}, "fill"), ({"schedule": "random"}, "schedule"),
                     ({"blocks": (1, 0)}, "blocks"), ({"hazards": True}, "hazards")):
        with pytest.raises(errors.InvalidArgument, match=f"{name}="):
            k((1,), (1,), [], **kw)


def test_the_capabilities_are_declared():
    cpu, cuda = backend_class("cpu").capabilities, backend_class("cuda").capabilities
    assert cpu.host_launches and cpu.block_orders and cpu.fill and cpu.block_subsets
    assert not cpu.hardware_rsqrt and not cpu.device_timings
    assert cuda.hardware_rsqrt and cuda.device_timings and not cuda.fill
