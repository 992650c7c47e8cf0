"""A small stand-in for ``hardware_catalog.load_catalog()`` with the same shape, for API tests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GIB = 2**30


class Gpu(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    name: str
    memory_bytes: int = Field(gt=0)
    bf16_tflops_dense: float = Field(gt=0)
    fp8_tflops_dense: float | None = None
    hbm_bandwidth_gbps: float = Field(gt=0)
    tdp_w: int = Field(gt=0)
    sources: list[str] = Field(default_factory=list)


class Server(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    name: str
    gpu_id: str
    gpu_count: int = Field(ge=1, le=64)
    price_usd: float | None = Field(default=None, ge=0)
    sources: list[str] = Field(default_factory=list)


class CloudOffer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    provider: str
    gpu_id: str
    gpu_count: int = Field(ge=1)
    usd_per_hour: float = Field(ge=0)
    sources: list[str] = Field(default_factory=list)


class Catalog(BaseModel):
    model_config = ConfigDict(frozen=True)
    version: str
    gpus: dict[str, Gpu]
    servers: dict[str, Server]
    cloud_offers: list[CloudOffer]


def fake_catalog(version: str = "test-1") -> Catalog:
    gpus = [
        Gpu(id="h100-sxm5-80gb", name="NVIDIA H100 SXM5 80GB", memory_bytes=80 * 10**9, bf16_tflops_dense=989,
            fp8_tflops_dense=1979, hbm_bandwidth_gbps=3350, tdp_w=700, sources=["datasheet"]),
        Gpu(id="a100-sxm4-80gb", name="NVIDIA A100 SXM4 80GB", memory_bytes=80 * GIB, bf16_tflops_dense=312,
            hbm_bandwidth_gbps=2039, tdp_w=400, sources=["datasheet"]),
        Gpu(id="h200-sxm-141gb", name="NVIDIA H200 SXM 141GB", memory_bytes=141 * 10**9, bf16_tflops_dense=989,
            fp8_tflops_dense=1979, hbm_bandwidth_gbps=4800, tdp_w=700, sources=["datasheet"]),
    ]
    servers = [
        Server(id="dell-xe9680-h100", name="Dell PowerEdge XE9680 (8x H100)", gpu_id="h100-sxm5-80gb",
               gpu_count=8, price_usd=300000, sources=["list price"]),
        Server(id="dgx-a100-80gb", name="NVIDIA DGX A100 80GB", gpu_id="a100-sxm4-80gb", gpu_count=8,
               price_usd=200000, sources=["list price"]),
    ]
    offers = [CloudOffer(id="aws-p5-48xlarge", provider="aws", gpu_id="h100-sxm5-80gb", gpu_count=8,
                         usd_per_hour=98.32, sources=["pricing page"])]
    return Catalog(version=version, gpus={g.id: g for g in gpus}, servers={s.id: s for s in servers},
                   cloud_offers=offers)
