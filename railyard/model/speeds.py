"""Link speeds by the names the stack file and the catalog use, in Gb/s: the one table.

It holds every speed a switch port or a NIC can run at, 800GbE included (an SN5600's native
port speed, which the fabric planner meets when it counts breakouts); which of them a compute
fabric may ask for is the spec's rule (SPEEDS_BY_KIND in spec/types.py): XDR InfiniBand (800 Gb/s,
Quantum-X800 and ConnectX-8), NDR and HDR; RoCE up to 400GbE.
"""

from __future__ import annotations

SPEED_GBPS = {"xdr": 800, "ndr": 400, "hdr": 200, "800gbe": 800, "400gbe": 400, "200gbe": 200, "100gbe": 100}
