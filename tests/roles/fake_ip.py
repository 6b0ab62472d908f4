#!/usr/bin/env python3
"""Stands in for iproute2's VF commands in role tests, as the lab's agent does on lab nodes.

Keeps per-PF VF settings in ip-state.json beside itself: `-j -d link show dev PF` prints them as
`ip` prints vfinfo_list, `link set dev PF vf N mac M trust on|off spoofchk on|off` records them.
"""
import json
import os
import sys

STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ip-state.json")


def load():
    try:
        with open(STATE) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return {}


args = sys.argv[1:]
state = load()
if args[:4] == ["-j", "-d", "link", "show"] and args[4] == "dev":
    pf = args[5]
    vfs = state.get(pf, {})
    print(json.dumps([{"ifname": pf, "vfinfo_list": [
        {"vf": int(n), "address": v["mac"], "trust": v["trust"], "spoofchk": v["spoofchk"]}
        for n, v in sorted(vfs.items(), key=lambda kv: int(kv[0]))]}]))
    sys.exit(0)
if args[:3] == ["link", "set", "dev"] and args[4] == "vf":
    pf, n = args[3], args[5]
    opts = dict(zip(args[6::2], args[7::2]))
    state.setdefault(pf, {})[n] = {"mac": opts["mac"], "trust": opts["trust"] == "on",
                                   "spoofchk": opts["spoofchk"] == "on"}
    with open(STATE, "w") as fh:
        json.dump(state, fh)
    sys.exit(0)
print(f"fake ip: unsupported {args}", file=sys.stderr)
sys.exit(2)
