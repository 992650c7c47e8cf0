"""The GPU fabric of a node (estimator.training.comm.gpu_fabric), used by the step time and the NCCL exports alike."""

from __future__ import annotations

import pytest

from estimator.planner.contract import PlanLayout
from estimator.planner.exports.nccl import environment
from estimator.training.comm import fabric_for, gpu_fabric
from hardware_catalog import load_catalog

CATALOG = load_catalog()


@pytest.mark.parametrize("server_id", sorted(CATALOG.servers))
def test_a_server_names_its_own_fabric(server_id: str) -> None:
    server = CATALOG.servers[server_id]
    gpu = CATALOG.gpus[server.gpu_id]
    assert gpu_fabric(gpu, server) == server.gpu_fabric
    assert fabric_for(gpu, server, server.gpu_count).kind == server.gpu_fabric


def _fabrics_of_servers_with(gpu_id: str) -> set[str]:
    """What the catalog's 8-GPU (or 4-GPU PCIe) servers of that GPU say, the 4-GPU NVLink mesh left out."""
    return {s.gpu_fabric for s in CATALOG.servers.values() if s.gpu_id == gpu_id and s.gpu_fabric != "nvlink-mesh"}


@pytest.mark.parametrize("gpu_id", sorted(g for g in CATALOG.gpus if len(_fabrics_of_servers_with(g)) == 1))
def test_without_a_server_the_gpu_implies_what_its_servers_have(gpu_id: str) -> None:
    """The inference (vendor, form factor, NVLink) agrees with every catalog server that carries the GPU."""
    assert {gpu_fabric(CATALOG.gpus[gpu_id], None)} == _fabrics_of_servers_with(gpu_id)


def test_nccl_nvls_only_on_nvlink4_nvswitch() -> None:
    """NCCL_NVLS_ENABLE follows the same fabric: set on an H100 NVSwitch board, never on PCIe L40S nodes."""
    def names(gpu_id: str, server_id: str | None) -> set[str]:
        layout = PlanLayout(gpu=gpu_id, server=server_id, num_nodes=1, gpus_per_node=8, world_size=8,
                            framework="pytorch", sharding="zero3", tp=1, pp=1, cp=1, ep=1, dp=8,
                            sequence_parallel=False, micro_batch_size=1, gradient_accumulation_steps=1,
                            global_batch_size=8, seq_len=4096, activation_checkpointing="none",
                            virtual_stages=1, offload="none", hsdp_shard_size=None)
        server = CATALOG.servers[server_id] if server_id else None
        return {v.name for v in environment(layout, CATALOG.gpus[gpu_id], server)}

    assert "NCCL_NVLS_ENABLE" in names("h100-sxm5-80gb", None)
    assert "NCCL_NVLS_ENABLE" in names("h100-sxm5-80gb", "nvidia-dgx-h100")
    assert "NCCL_NVLS_ENABLE" not in names("l40s-48gb", "dell-r760xa-l40s")
    assert "NCCL_NVLS_ENABLE" not in names("a100-sxm4-80gb", None)  # NVLink 3: no SHARP
