#!/usr/bin/python
"""Check the rail interfaces and find the host's network stack, in one read-only module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rail_network_facts
short_description: Check the rail interfaces and find which network stack a host configures them with
description:
  - Checks every rail interface (a netdev name, an IPv4 address inside its rail's subnet, a gateway
    inside that subnet, a compute network that contains the address and is not a default route) and
    reports all problems together, each naming the interface.
  - With I(stack=auto), finds the network stack under I(etc_root) and I(run_root), in this order;
    netplan when C(/etc/netplan/*.yaml) exist (other than the role's own file); systemd-networkd when
    it is enabled (C(systemd-networkd.service) wanted by C(multi-user.target) in C(/etc) or the vendor
    unit directories, or its D-Bus alias in C(/etc/systemd/system), and not masked) or running (its
    state file C(/run/systemd/netif/state)); ifupdown when C(/etc/network/interfaces) exists.
    Anything else is refused with what was found (NetworkManager, wicked, network-scripts,
    networkd files without the service) when I(state=present) and there are interfaces to write.
  - For ifupdown, refuses a main file that does not include C(/etc/network/interfaces.d/railyard-rails)
    through a C(source) or C(source-directory) line; the role never edits the main file.
  - Lists the files of the role that exist (every stack's), so the role can remove those it no
    longer wants. Reads only; changes nothing.
options:
  interfaces:
    description: The rail interfaces.
    type: list
    elements: dict
    required: true
    suboptions:
      name: {description: Netdev name., type: str, required: true}
      address: {description: IPv4 address on the rail., type: str, required: true}
      prefixlen: {description: Prefix length of the rail's subnet., type: int, required: true}
      rail: {description: Rail number., type: int, required: true}
      gateway: {description: The rail's gateway (RoCE), or none (InfiniBand)., type: str}
      mtu: {description: MTU of the interface, or none to leave it., type: int}
  compute_cidr:
    description: The compute network, routed through each rail's gateway; empty when no rail has one.
    type: str
    default: ""
  stack:
    description: The network stack, or auto to find it.
    type: str
    choices: [auto, networkd, netplan, ifupdown]
    default: auto
  state:
    description: present (the stack must be supported when there are interfaces) or absent.
    type: str
    choices: [present, absent]
    default: present
  etc_root:
    description: Root of the tree holding /etc (and the vendor unit directories).
    type: path
    default: /
  run_root:
    description: Root of the tree holding /run.
    type: path
    default: /
  table_base:
    description: A rail's routing table is table_base + rail.
    type: int
    default: 100
  priority_base:
    description: A rail's source rule has priority priority_base + rail.
    type: int
    default: 1000
author: Railyard
"""

EXAMPLES = r"""
- name: Check the rails and find the network stack
  rail_network_facts:
    interfaces:
      - {name: enp9s0np0, address: 10.128.0.2, prefixlen: 18, rail: 0, gateway: 10.128.0.1, mtu: 9000}
    compute_cidr: 10.128.0.0/16
  register: rails
"""

RETURN = r"""
stack:
  description: The stack the files are written for (networkd, netplan or ifupdown), or none.
  returned: always
  type: str
found:
  description: What the detection saw, as host paths (C(/etc/...)), for messages.
  returned: always
  type: list
  elements: str
interfaces:
  description: >-
    The interfaces sorted by rail, each with name, address, prefixlen, rail, gateway (or none), mtu
    (or none), network (the rail's subnet), table and priority.
  returned: always
  type: list
  elements: dict
existing:
  description: The role's files that exist now, by stack (absolute paths under etc_root).
  returned: always
  type: dict
"""

import fnmatch
import glob
import ipaddress
import os

from ansible.module_utils.basic import AnsibleModule

SUPPORTED = "systemd-networkd, netplan and ifupdown"
# The role's files, relative to the root (rail_network's vars/main.yml names the same paths).
NETWORKD_DIR = "etc/systemd/network"
NETWORKD_GLOB = "60-railyard-*.network"
NETPLAN_FILE = "etc/netplan/60-railyard-rails.yaml"
IFUPDOWN_MAIN = "etc/network/interfaces"
IFUPDOWN_FILE = "etc/network/interfaces.d/railyard-rails"
# systemd-networkd is enabled when one of these links exists (systemctl enable makes the first
# two; vendors that enable it by default ship the others) and the unit is not masked.
NETWORKD_ENABLED = (
    "etc/systemd/system/multi-user.target.wants/systemd-networkd.service",
    "etc/systemd/system/dbus-org.freedesktop.network1.service",
    "usr/lib/systemd/system/multi-user.target.wants/systemd-networkd.service",
    "lib/systemd/system/multi-user.target.wants/systemd-networkd.service",
)
NETWORKD_MASK = "etc/systemd/system/systemd-networkd.service"
# Written by systemd-networkd itself while it runs (tmpfiles only makes the directory).
NETWORKD_STATE = "run/systemd/netif/state"
# Stacks the role does not support, by what marks them.
OTHERS = (
    ("NetworkManager", ("etc/NetworkManager/NetworkManager.conf",
                        "etc/systemd/system/multi-user.target.wants/NetworkManager.service",
                        "etc/NetworkManager/system-connections/*")),
    ("wicked", ("etc/wicked", "etc/systemd/system/multi-user.target.wants/wicked.service")),
    ("network-scripts", ("etc/sysconfig/network-scripts/ifcfg-*",)),
    ("systemd-networkd files, but the service is neither enabled nor running", ("etc/systemd/network/*.network",)),
)


def _under(root: str, rel: str) -> str:
    return os.path.join(root, rel)


def _host(rel: str) -> str:
    return "/" + rel


def _matches(root: str, rel: str) -> list[str]:
    """Host paths of what `rel` (a path or a glob) names under root; links need not resolve."""
    if any(c in rel for c in "*?["):
        return sorted(_host(os.path.relpath(p, root)) for p in glob.glob(_under(root, rel)))
    return [_host(rel)] if os.path.lexists(_under(root, rel)) else []


def check_interfaces(interfaces: list[dict], compute_cidr: str, table_base: int = 100,
                     priority_base: int = 1000) -> tuple[list[dict], list[str]]:
    """The interfaces, sorted by rail, with their rail subnet, table and rule priority; and every
    problem found, each naming the interface."""
    errors: list[str] = []
    compute = None
    if compute_cidr:
        try:
            compute = ipaddress.IPv4Network(compute_cidr)
        except ValueError as e:
            errors.append(f"rail_network_compute_cidr {compute_cidr!r} is not an IPv4 network ({e})")
        else:
            if compute.prefixlen == 0:
                errors.append(f"rail_network_compute_cidr {compute_cidr} would be a default route: "
                              "Railyard never gives a node one; give the compute network")
                compute = None
    out, seen = [], {"name": {}, "rail": {}, "address": {}}
    for n, i in enumerate(interfaces):
        where = f"rail_network_interfaces[{n}] ({i.get('name')})"
        name = i.get("name") or ""
        if not name or len(name) > 15 or name in (".", "..") or any(c in name for c in "/: \t\n"):
            errors.append(f"{where}: {name!r} is not a netdev name (1-15 characters, no '/', ':' or space)")
        for key in ("name", "rail", "address"):
            if i.get(key) in seen[key]:
                errors.append(f"{where}: {key} {i.get(key)} is also rail_network_interfaces[{seen[key][i[key]]}]'s")
            seen[key].setdefault(i.get(key), n)
        if int(i.get("rail", -1)) < 0:
            errors.append(f"{where}: rail {i.get('rail')} is negative")
        prefixlen = int(i.get("prefixlen", -1))
        try:
            iface = ipaddress.IPv4Interface(f"{i.get('address')}/{prefixlen}")
        except ValueError:
            errors.append(f"{where}: {i.get('address')}/{prefixlen} is not an IPv4 address and prefix length")
            continue
        net = iface.network
        if net.prefixlen < 31 and iface.ip in (net.network_address, net.broadcast_address):
            errors.append(f"{where}: {iface.ip} is the {'network' if iface.ip == net.network_address else 'broadcast'}"
                          f" address of {net}")
        gateway = i.get("gateway") or None
        if gateway is not None:
            try:
                gw = ipaddress.IPv4Address(gateway)
            except ValueError:
                errors.append(f"{where}: gateway {gateway!r} is not an IPv4 address")
            else:
                if gw not in net or gw == iface.ip:
                    errors.append(f"{where}: gateway {gw} is {'the address itself' if gw == iface.ip else 'outside ' + str(net)}")
            if not compute_cidr:
                errors.append(f"{where}: a gateway needs rail_network_compute_cidr, the compute network routed through it")
            elif compute is not None and not net.subnet_of(compute):
                errors.append(f"{where}: the rail's subnet {net} is not inside rail_network_compute_cidr {compute}")
        mtu = i.get("mtu")
        if mtu is not None and not 68 <= int(mtu) <= 65535:
            errors.append(f"{where}: mtu {mtu} is outside 68-65535")
        rail = int(i.get("rail", 0))
        table = table_base + rail
        if gateway is not None and not (0 < table < 2**32 and table not in (253, 254, 255)):
            errors.append(f"{where}: routing table {table} (rail_network_route_table_base + rail) is reserved or invalid")
        out.append({"name": name, "address": str(iface.ip), "prefixlen": prefixlen, "rail": rail,
                    "gateway": gateway, "mtu": None if mtu is None else int(mtu), "network": str(net),
                    "table": table, "priority": priority_base + rail})
    return sorted(out, key=lambda x: (x["rail"], x["name"])), errors


def _resolve(path: str) -> str:
    """A path in /etc/network/interfaces, relative ones being relative to /etc/network."""
    return os.path.normpath(path if path.startswith("/") else os.path.join("/etc/network", path))


def _glob_matches(pattern: str, path: str) -> bool:
    """Shell-glob match, where a wildcard never crosses a '/'."""
    a, b = pattern.split("/"), path.split("/")
    return len(a) == len(b) and all(fnmatch.fnmatchcase(y, x) for x, y in zip(a, b))


def ifupdown_includes(text: str, path: str = "/" + IFUPDOWN_FILE) -> str | None:
    """The line of the main interfaces file that includes `path`, or None."""
    name = os.path.basename(path)
    for line in text.splitlines():
        words = line.split()
        if len(words) != 2 or words[0].startswith("#"):
            continue
        if words[0] == "source" and _glob_matches(_resolve(words[1]), path):
            return line.strip()
        # source-directory takes run-parts names only (letters, digits, '_' and '-'), as ours is.
        if words[0] == "source-directory" and _resolve(words[1]) == os.path.dirname(path) \
                and all(c.isalnum() or c in "_-" for c in name):
            return line.strip()
    return None


def detect(etc_root: str, run_root: str) -> tuple[str | None, list[str]]:
    """The stack found under the roots (netplan, networkd, ifupdown or None) and what was seen."""
    netplan = [p for p in _matches(etc_root, "etc/netplan/*.yaml") if p != _host(NETPLAN_FILE)]
    if netplan:
        return "netplan", [f"netplan configuration {', '.join(netplan)}"]
    masked = os.path.islink(_under(etc_root, NETWORKD_MASK)) and \
        os.readlink(_under(etc_root, NETWORKD_MASK)) == "/dev/null"
    enabled = [p for rel in NETWORKD_ENABLED for p in _matches(etc_root, rel)]
    running = _matches(run_root, NETWORKD_STATE)
    if (enabled or running) and not masked:
        return "networkd", [f"systemd-networkd {'enabled (' + ', '.join(enabled) + ')' if enabled else 'running'}"
                            + (f", its state file {running[0]}" if running else "")]
    if os.path.isfile(_under(etc_root, IFUPDOWN_MAIN)):
        return "ifupdown", [f"ifupdown's {_host(IFUPDOWN_MAIN)}"]
    found = []
    if masked:
        found.append(f"systemd-networkd masked ({_host(NETWORKD_MASK)} -> /dev/null)")
    for what, marks in OTHERS:
        paths = [p for rel in marks for p in _matches(etc_root, rel)
                 if not fnmatch.fnmatchcase(os.path.basename(p), NETWORKD_GLOB)]
        if paths:
            found.append(f"{what} ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})")
    return None, found


def existing_files(etc_root: str) -> dict[str, list[str]]:
    """The role's files that exist under etc_root, by stack."""
    return {"networkd": sorted(glob.glob(os.path.join(etc_root, NETWORKD_DIR, NETWORKD_GLOB))),
            "netplan": [p for p in [os.path.join(etc_root, NETPLAN_FILE)] if os.path.lexists(p)],
            "ifupdown": [p for p in [os.path.join(etc_root, IFUPDOWN_FILE)] if os.path.lexists(p)]}


def facts(params: dict) -> tuple[dict, str | None]:
    """The module's result and, when the role must stop, the message."""
    interfaces, errors = check_interfaces(params["interfaces"], params["compute_cidr"],
                                          params["table_base"], params["priority_base"])
    etc_root, run_root = params["etc_root"], params["run_root"]
    if params["stack"] == "auto":
        stack, found = detect(etc_root, run_root)
    else:
        stack, found = params["stack"], ["rail_network_stack: " + params["stack"]]
    result = {"stack": stack, "found": found, "interfaces": interfaces, "existing": existing_files(etc_root)}
    if errors:
        return result, "rail_network: " + "; ".join(errors)
    if params["state"] == "absent" or not interfaces:
        return result, None
    if stack is None:
        return result, (f"rail_network: no supported network stack on this host (found: "
                        f"{'; '.join(found) if found else 'no network configuration: no /etc/netplan/*.yaml, no enabled or running systemd-networkd, no /etc/network/interfaces'}). "
                        f"The role supports {SUPPORTED}; configure the rails another way, or set "
                        "rail_network_stack to the one this host runs")
    if stack == "ifupdown":
        main = _under(etc_root, IFUPDOWN_MAIN)
        try:
            with open(main, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except FileNotFoundError:
            text = None
        line = None if text is None else ifupdown_includes(text)
        found.append(f"included by '{line}'" if line else f"{_host(IFUPDOWN_MAIN)} without a line that includes "
                     f"{_host(IFUPDOWN_FILE)}")
        if line is None:
            return result, (f"rail_network: ifupdown: {_host(IFUPDOWN_MAIN)} "
                            f"{'does not exist' if text is None else 'does not include ' + _host(IFUPDOWN_FILE)}; "
                            "add the line 'source /etc/network/interfaces.d/*' (Debian's default) to it; "
                            "the role does not edit the main file")
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interfaces=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                address=dict(type="str", required=True),
                prefixlen=dict(type="int", required=True),
                rail=dict(type="int", required=True),
                gateway=dict(type="str"),
                mtu=dict(type="int"),
            )),
            compute_cidr=dict(type="str", default=""),
            stack=dict(type="str", choices=["auto", "networkd", "netplan", "ifupdown"], default="auto"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            etc_root=dict(type="path", default="/"),
            run_root=dict(type="path", default="/"),
            table_base=dict(type="int", default=100),
            priority_base=dict(type="int", default=1000),
        ),
        supports_check_mode=True,
    )
    result, problem = facts(module.params)
    if problem:
        module.fail_json(msg=problem, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
