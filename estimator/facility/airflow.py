"""Cooling air a node needs to carry its heat away, at a stated temperature rise.

Sensible heat of air: ``P = rho * c_p * Q * dT``, so ``Q = P / (rho * c_p * dT)`` (ASHRAE Fundamentals,
psychrometrics; the same relation as the HVAC rule of thumb ``CFM = BTU/h / (1.08 x dT in F)``, whose 1.08 is
``0.075 lb/ft3 x 0.24 BTU/(lb F) x 60 min/h`` for air at sea level). Air at sea level and about 20 C:
``rho = 1.2 kg/m3``, ``c_p = 1005 J/(kg K)``. 1 m3/s = 2118.88 CFM (1 ft = 0.3048 m exactly).

The temperature rise is a planning choice: server vendors size fans for roughly 10-20 K between inlet and
exhaust (NVIDIA's DGX H100 site guide quotes its airflow at a stated inlet temperature); the default here is
:data:`DEFAULT_DELTA_T_K` and every answer states the rise it used.
"""

from __future__ import annotations

from typing import Final

__all__ = ["AIR_CP_J_PER_KG_K", "AIR_DENSITY_KG_PER_M3", "CFM_PER_M3_PER_S", "DEFAULT_DELTA_T_K", "airflow_cfm",
           "airflow_m3_per_s"]

AIR_DENSITY_KG_PER_M3: Final = 1.2
AIR_CP_J_PER_KG_K: Final = 1005.0
CFM_PER_M3_PER_S: Final = 1.0 / (0.3048**3) * 60.0  # 2118.88
DEFAULT_DELTA_T_K: Final = 15.0


def airflow_m3_per_s(watts: float, delta_t_k: float = DEFAULT_DELTA_T_K) -> float:
    """Volume of air per second that carries ``watts`` away when it warms by ``delta_t_k`` kelvin."""
    if delta_t_k <= 0:
        raise ValueError("delta_t_k must be positive")
    return max(0.0, watts) / (AIR_DENSITY_KG_PER_M3 * AIR_CP_J_PER_KG_K * delta_t_k)


def airflow_cfm(watts: float, delta_t_k: float = DEFAULT_DELTA_T_K) -> float:
    """:func:`airflow_m3_per_s` in cubic feet per minute."""
    return airflow_m3_per_s(watts, delta_t_k) * CFM_PER_M3_PER_S
