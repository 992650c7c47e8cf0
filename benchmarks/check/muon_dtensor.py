"""What one rank runs for ``torch.optim.Muon``'s Newton-Schulz on an FSDP2 shard, on the CPU in seconds.

A decoder matrix is made a ``DTensor`` ``Shard(0)`` over a fake process group of W ranks (PyTorch's own
``fake`` backend) holding fake tensors (``FakeTensorMode``: no data, no FLOPs), and
``torch.optim._muon._zeropower_via_newtonschulz`` runs on it under ``torch.profiler``. The GEMMs DTensor runs on
the local tensors (``aten::mm`` / ``aten::addmm`` called from the fake-tensor mode, below DTensor's sharding
propagation) give this rank's FLOPs; a dispatch mode above DTensor counts the operators it dispatches. The first
call fills DTensor's sharding-propagation cache (its meta-tensor GEMMs would count too), so the second is recorded.

``python benchmarks/check/muon_dtensor.py W ROWSxCOLS ...`` prints one JSON object per matrix:
``{"rows", "cols", "world", "local_flops", "local_gemms", "dtensor_ops"}``. ``tests/test_muon_dtensor.py`` holds
:func:`estimator.training.mechanisms.muon_newton_schulz_local_flops` and ``muon_dtensor_ops`` to it."""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.optim._muon import _zeropower_via_newtonschulz
from torch.profiler import profile
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode

GEMMS = ("aten::mm", "aten::addmm")
COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's DEFAULT_A, DEFAULT_B, DEFAULT_C
NS_STEPS = 5  # torch.optim.Muon's DEFAULT_NS_STEPS


class OpCount(TorchDispatchMode):
    """Counts the operators dispatched through it, by name; entered above DTensor, it sees DTensor's operators."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counts[str(func)] = self.counts.get(str(func), 0) + 1
        return func(*args, **(kwargs or {}))


def gemms_by_parent(prof: Any) -> dict[str, int]:
    """The profiled ``aten::mm`` / ``aten::addmm`` calls as ``"parent|rows x inner x cols"`` -> count. The parent
    tells the local calls (under the fake-tensor mode, ``PythonDispatchMode``, or under DTensor on a real device,
    ``PythonSubclass``) from the DTensor-level ones."""
    out: dict[str, int] = {}
    for e in prof.events():
        if e.name not in GEMMS or len(e.input_shapes) < 2:
            continue
        s = e.input_shapes
        a, b = (s[1], s[2]) if e.name == "aten::addmm" else (s[0], s[1])
        if len(a) != 2 or len(b) != 2:
            continue
        parent = e.cpu_parent.name if e.cpu_parent is not None else ""
        key = f"{parent}|{a[0]}x{a[1]}x{b[1]}"
        out[key] = out.get(key, 0) + 1
    return out


def probe(mesh: Any, world: int, rows: int, cols: int) -> dict[str, Any]:
    local = torch.empty(rows // world, cols)
    g = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
    _zeropower_via_newtonschulz(g, COEFFICIENTS, NS_STEPS, 1e-7)  # fills the sharding-propagation cache
    with profile(record_shapes=True) as prof:
        _zeropower_via_newtonschulz(g, COEFFICIENTS, NS_STEPS, 1e-7)
    gemms = {key.split("|")[1]: n for key, n in gemms_by_parent(prof).items()
             if key.startswith("PythonDispatchMode|")}
    flops = sum(2 * a * k * b * n for key, n in gemms.items() for a, k, b in [map(int, key.split("x"))])
    counter = OpCount()
    with counter:
        _zeropower_via_newtonschulz(g, COEFFICIENTS, NS_STEPS, 1e-7)
    return {"rows": rows, "cols": cols, "world": world, "local_flops": flops, "local_gemms": gemms,
            "dtensor_ops": sum(counter.counts.values())}


def main(argv: list[str]) -> None:
    world = int(argv[0])
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with FakeTensorMode():
            for shape in argv[1:]:
                rows, cols = map(int, shape.split("x"))
                print(json.dumps(probe(mesh, world, rows, cols)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
