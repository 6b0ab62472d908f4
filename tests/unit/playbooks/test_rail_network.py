"""The rail_network role's templates rendered for a RoCE and an InfiniBand host (exact goldens), and
its facts module's rules: the interface checks, the stack detection, the ifupdown include check."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import jinja2
import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "playbooks/roles/rail_network"


def _load_facts_module():
    spec = importlib.util.spec_from_file_location("rail_network_facts", ROLE / "library/rail_network_facts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


facts = _load_facts_module()

# A RoCE host of two rails (us-south-vela's first node: rails 10.128.0.0/18 and 10.128.64.0/18,
# each with its leaf's gateway), and an InfiniBand host (us-east-bm's: no gateway, no MTU given).
ROCE_CIDR = "10.128.0.0/16"
ROCE = [
    {"name": "enp19s0np0", "address": "10.128.64.2", "prefixlen": 18, "rail": 1, "gateway": "10.128.64.1", "mtu": 9000},
    {"name": "enp9s0np0", "address": "10.128.0.2", "prefixlen": 18, "rail": 0, "gateway": "10.128.0.1", "mtu": 9000},
]
IB = [
    {"name": "ibp24s0", "address": "10.64.0.2", "prefixlen": 18, "rail": 0, "gateway": None, "mtu": None},
    {"name": "ibp64s0", "address": "10.64.64.2", "prefixlen": 18, "rail": 1, "gateway": None, "mtu": None},
]

HEADER = "# Managed by Railyard (role rail_network); do not edit.\n"
ROUTED = """\
# Traffic from {ip} looks up table {t} (rule priority {p}): the rail's
# subnet on the link, the compute network through the rail's gateway. Never a default route.
"""

ROCE_NETWORKD_RAIL0 = HEADER + """\
# Rail 0 of the compute network on enp9s0np0: a static address, no DHCP, and the link
# is not waited for at boot.
""" + ROUTED.format(ip="10.128.0.2", t=100, p=1000) + """\
[Match]
Name=enp9s0np0

[Link]
RequiredForOnline=no
MTUBytes=9000

[Network]
Address=10.128.0.2/18

[Route]
Destination=10.128.0.0/18
Scope=link
PreferredSource=10.128.0.2
Table=100

[Route]
Destination=10.128.0.0/16
Gateway=10.128.0.1
PreferredSource=10.128.0.2
Table=100

[RoutingPolicyRule]
From=10.128.0.2/32
Table=100
Priority=1000
"""

ROCE_NETWORKD_RAIL1 = HEADER + """\
# Rail 1 of the compute network on enp19s0np0: a static address, no DHCP, and the link
# is not waited for at boot.
""" + ROUTED.format(ip="10.128.64.2", t=101, p=1001) + """\
[Match]
Name=enp19s0np0

[Link]
RequiredForOnline=no
MTUBytes=9000

[Network]
Address=10.128.64.2/18

[Route]
Destination=10.128.64.0/18
Scope=link
PreferredSource=10.128.64.2
Table=101

[Route]
Destination=10.128.0.0/16
Gateway=10.128.64.1
PreferredSource=10.128.64.2
Table=101

[RoutingPolicyRule]
From=10.128.64.2/32
Table=101
Priority=1001
"""

IB_NETWORKD_RAIL0 = HEADER + """\
# Rail 0 of the compute network on ibp24s0: a static address, no DHCP, and the link
# is not waited for at boot.
[Match]
Name=ibp24s0

[Link]
RequiredForOnline=no

[Network]
Address=10.64.0.2/18
"""

NETPLAN_HEAD = HEADER + """\
# The rails of the compute network: static addresses, no DHCP, links not waited for at boot.
# A rail with a gateway routes traffic from its address through a table of its own: the rail's
# subnet on the link, the compute network through the gateway. Never a default route.
network:
  version: 2
  ethernets:
"""

ROCE_NETPLAN = NETPLAN_HEAD + """\
    "enp9s0np0":
      addresses:
        - 10.128.0.2/18
      dhcp4: false
      dhcp6: false
      mtu: 9000
      optional: true
      routes:
        - to: 10.128.0.0/18
          scope: link
          from: 10.128.0.2
          table: 100
        - to: 10.128.0.0/16
          via: 10.128.0.1
          from: 10.128.0.2
          table: 100
      routing-policy:
        - from: 10.128.0.2/32
          table: 100
          priority: 1000
    "enp19s0np0":
      addresses:
        - 10.128.64.2/18
      dhcp4: false
      dhcp6: false
      mtu: 9000
      optional: true
      routes:
        - to: 10.128.64.0/18
          scope: link
          from: 10.128.64.2
          table: 101
        - to: 10.128.0.0/16
          via: 10.128.64.1
          from: 10.128.64.2
          table: 101
      routing-policy:
        - from: 10.128.64.2/32
          table: 101
          priority: 1001
"""

IB_NETPLAN = NETPLAN_HEAD + """\
    "ibp24s0":
      addresses:
        - 10.64.0.2/18
      dhcp4: false
      dhcp6: false
      optional: true
    "ibp64s0":
      addresses:
        - 10.64.64.2/18
      dhcp4: false
      dhcp6: false
      optional: true
"""

IFUPDOWN_HEAD = HEADER + """\
# The rails of the compute network, read through the 'source' line of /etc/network/interfaces.
# A rail with a gateway routes traffic from its address through a table of its own: the rail's
# subnet on the link, the compute network through the gateway. Never a default route.
"""

ROCE_IFUPDOWN = IFUPDOWN_HEAD + """
auto enp9s0np0
iface enp9s0np0 inet static
    address 10.128.0.2/18
    mtu 9000
    up ip route replace 10.128.0.0/18 dev enp9s0np0 src 10.128.0.2 scope link table 100
    up ip route replace 10.128.0.0/16 via 10.128.0.1 dev enp9s0np0 src 10.128.0.2 table 100
    up ip rule del pref 1000 2>/dev/null || true
    up ip rule add pref 1000 from 10.128.0.2 lookup 100
    down ip rule del pref 1000 2>/dev/null || true
    down ip route flush table 100 2>/dev/null || true

auto enp19s0np0
iface enp19s0np0 inet static
    address 10.128.64.2/18
    mtu 9000
    up ip route replace 10.128.64.0/18 dev enp19s0np0 src 10.128.64.2 scope link table 101
    up ip route replace 10.128.0.0/16 via 10.128.64.1 dev enp19s0np0 src 10.128.64.2 table 101
    up ip rule del pref 1001 2>/dev/null || true
    up ip rule add pref 1001 from 10.128.64.2 lookup 101
    down ip rule del pref 1001 2>/dev/null || true
    down ip route flush table 101 2>/dev/null || true
"""

IB_IFUPDOWN = IFUPDOWN_HEAD + """
auto ibp24s0
iface ibp24s0 inet static
    address 10.64.0.2/18

auto ibp64s0
iface ibp64s0 inet static
    address 10.64.64.2/18
"""


def checked(interfaces: list[dict], cidr: str = "") -> list[dict]:
    out, errors = facts.check_interfaces(interfaces, cidr)
    assert errors == []
    return out


def render(template: str, interfaces: list[dict], cidr: str, iface: dict | None = None) -> str:
    """The template as Ansible's template lookup renders it (trim_blocks, trailing newline kept),
    under StrictUndefined, with the variables the role gives it."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"), trim_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return env.get_template(template).render(__rail_network_ifaces=interfaces, __rail_network_iface=iface,
                                             rail_network_compute_cidr=cidr)


def test_interfaces_are_sorted_by_rail_with_their_subnet_table_and_rule_priority():
    out = checked(ROCE, ROCE_CIDR)
    assert [(i["name"], i["network"], i["table"], i["priority"]) for i in out] == [
        ("enp9s0np0", "10.128.0.0/18", 100, 1000), ("enp19s0np0", "10.128.64.0/18", 101, 1001)]


@pytest.mark.parametrize("name, interfaces, cidr, index, golden", [
    ("roce rail 0", ROCE, ROCE_CIDR, 0, ROCE_NETWORKD_RAIL0),
    ("roce rail 1", ROCE, ROCE_CIDR, 1, ROCE_NETWORKD_RAIL1),
    ("ib rail 0", IB, "", 0, IB_NETWORKD_RAIL0),
])
def test_networkd_file_per_rail_routes_the_compute_network_through_the_gateway_in_the_rails_table(
        name, interfaces, cidr, index, golden):
    ifaces = checked(interfaces, cidr)
    assert render("rail.network.j2", ifaces, cidr, ifaces[index]) == golden, name


@pytest.mark.parametrize("name, interfaces, cidr, golden", [
    ("roce", ROCE, ROCE_CIDR, ROCE_NETPLAN), ("ib", IB, "", IB_NETPLAN)])
def test_netplan_file_has_every_rail_by_name_with_routes_only_where_a_gateway_is(name, interfaces, cidr, golden):
    assert render("netplan-rails.yaml.j2", checked(interfaces, cidr), cidr) == golden, name


@pytest.mark.parametrize("name, interfaces, cidr, golden", [
    ("roce", ROCE, ROCE_CIDR, ROCE_IFUPDOWN), ("ib", IB, "", IB_IFUPDOWN)])
def test_ifupdown_file_has_a_static_stanza_per_rail(name, interfaces, cidr, golden):
    assert render("ifupdown-rails.j2", checked(interfaces, cidr), cidr) == golden, name


def test_netplan_file_is_yaml_with_every_rail_keyed_by_its_netdev():
    import yaml

    doc = yaml.safe_load(ROCE_NETPLAN)["network"]["ethernets"]
    assert list(doc) == ["enp9s0np0", "enp19s0np0"]
    assert doc["enp19s0np0"]["addresses"] == ["10.128.64.2/18"]


def test_every_route_goes_to_a_rail_subnet_or_the_compute_network_never_a_default_route():
    allowed = {"10.128.0.0/18", "10.128.64.0/18", ROCE_CIDR}
    for golden in (ROCE_NETWORKD_RAIL0, ROCE_NETWORKD_RAIL1, ROCE_NETPLAN, ROCE_IFUPDOWN):
        dests = [line.split("=", 1)[1] for line in golden.splitlines() if line.startswith("Destination=")]
        dests += [line.split(": ", 1)[1] for line in golden.splitlines() if line.strip().startswith("- to: ")]
        dests += [line.split()[4] for line in golden.splitlines() if line.strip().startswith("up ip route replace")]
        assert dests and set(dests) <= allowed, dests


def test_bad_interfaces_are_all_reported_together_each_naming_its_interface():
    bad = [
        {"name": "enp9s0np0", "address": "10.128.0.0", "prefixlen": 18, "rail": 0, "gateway": "10.129.0.1", "mtu": 9000},
        {"name": "enp19s0np0", "address": "10.128.64.2", "prefixlen": 18, "rail": 0, "gateway": None, "mtu": 40},
        {"name": "bad/name", "address": "10.128.128.2", "prefixlen": 18, "rail": 2, "gateway": None, "mtu": None},
        {"name": "enp1s0", "address": "fe80::1", "prefixlen": 64, "rail": 3, "gateway": None, "mtu": None},
    ]
    _, errors = facts.check_interfaces(bad, "")
    text = "\n".join(errors)
    assert "rail_network_interfaces[0] (enp9s0np0): 10.128.0.0 is the network address of 10.128.0.0/18" in text
    assert "rail_network_interfaces[0] (enp9s0np0): gateway 10.129.0.1 is outside 10.128.0.0/18" in text
    assert "rail_network_interfaces[0] (enp9s0np0): a gateway needs rail_network_compute_cidr" in text
    assert "rail_network_interfaces[1] (enp19s0np0): rail 0 is also rail_network_interfaces[0]'s" in text
    assert "rail_network_interfaces[1] (enp19s0np0): mtu 40 is outside 68-65535" in text
    assert "rail_network_interfaces[2] (bad/name): 'bad/name' is not a netdev name" in text
    assert "rail_network_interfaces[3] (enp1s0): fe80::1/64 is not an IPv4 address" in text
    assert len(errors) == 7, errors


@pytest.mark.parametrize("cidr, message", [
    ("0.0.0.0/0", "would be a default route: Railyard never gives a node one"),
    ("10.128.0.1/16", "is not an IPv4 network"),
    ("10.200.0.0/16", "the rail's subnet 10.128.0.0/18 is not inside rail_network_compute_cidr 10.200.0.0/16"),
])
def test_the_compute_network_must_contain_the_rails_and_never_be_a_default_route(cidr, message):
    _, errors = facts.check_interfaces(ROCE[1:], cidr)
    assert any(message in e for e in errors), errors


# --- detection --------------------------------------------------------------------------------

def _tree(root: Path, files: dict[str, str | None]) -> Path:
    """Files under root; None makes a symlink to a unit that does not exist under root (as an
    enabled unit's link looks in a temp root)."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            os.symlink("/lib/systemd/system/" + p.name, p)
        elif text == "->/dev/null":
            os.symlink("/dev/null", p)
        else:
            p.write_text(text)
    return root


ENABLED = "etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
DETECTION = [
    ("netplan wins over everything", {"etc/netplan/50-cloud-init.yaml": "network: {version: 2}\n", ENABLED: None,
                                      "etc/network/interfaces": ""}, "netplan", "netplan configuration /etc/netplan/50-cloud-init.yaml"),
    ("networkd enabled by systemctl", {ENABLED: None, "etc/network/interfaces": ""}, "networkd",
     "systemd-networkd enabled (/" + ENABLED + ")"),
    ("networkd's D-Bus alias", {"etc/systemd/system/dbus-org.freedesktop.network1.service": None}, "networkd",
     "systemd-networkd enabled"),
    ("networkd enabled by the vendor", {"usr/lib/systemd/system/multi-user.target.wants/systemd-networkd.service": None},
     "networkd", "systemd-networkd enabled"),
    ("networkd running", {"run/systemd/netif/state": "OPER_STATE=routable\n"}, "networkd",
     "systemd-networkd running, its state file /run/systemd/netif/state"),
    ("masked networkd is not networkd", {ENABLED: None, "etc/systemd/system/systemd-networkd.service": "->/dev/null",
                                         "etc/network/interfaces": ""}, "ifupdown", "ifupdown's /etc/network/interfaces"),
    ("ifupdown", {"etc/network/interfaces": "source /etc/network/interfaces.d/*\n"}, "ifupdown",
     "ifupdown's /etc/network/interfaces"),
    ("NetworkManager", {"etc/NetworkManager/NetworkManager.conf": "[main]\n"}, None,
     "NetworkManager (/etc/NetworkManager/NetworkManager.conf)"),
    ("wicked", {"etc/wicked/common.xml": ""}, None, "wicked (/etc/wicked)"),
    ("networkd files without the service", {"etc/systemd/network/10-mgmt.network": "[Match]\n"}, None,
     "systemd-networkd files, but the service is neither enabled nor running (/etc/systemd/network/10-mgmt.network)"),
    ("nothing", {}, None, None),
]


@pytest.mark.parametrize("name, files, stack, evidence", DETECTION, ids=[d[0] for d in DETECTION])
def test_detection_order_is_netplan_then_enabled_or_running_networkd_then_ifupdown(tmp_path, name, files, stack, evidence):
    root = _tree(tmp_path, files)
    got, found = facts.detect(str(root), str(root))
    assert got == stack, f"{name}: {found}"
    if evidence is None:
        assert found == []
    else:
        assert any(evidence in f for f in found), f"{name}: {found}"


def test_the_roles_own_netplan_file_does_not_make_a_host_netplan(tmp_path):
    root = _tree(tmp_path, {"etc/netplan/60-railyard-rails.yaml": "", "etc/network/interfaces": ""})
    assert facts.detect(str(root), str(root))[0] == "ifupdown"


@pytest.mark.parametrize("line, included", [
    ("source /etc/network/interfaces.d/*", True),
    ("  source interfaces.d/*", True),
    ("source /etc/network/interfaces.d/railyard-rails", True),
    ("source-directory /etc/network/interfaces.d", True),
    ("source-directory interfaces.d/", True),
    ("# source /etc/network/interfaces.d/*", False),
    ("source /etc/network/interfaces.d/*.cfg", False),
    ("source /etc/network/*", False),  # a wildcard does not cross '/'
    ("source-directory /etc/network/other.d", False),
])
def test_ifupdown_main_file_must_source_the_roles_file(line, included):
    text = "auto lo\niface lo inet loopback\n" + line + "\n"
    assert (facts.ifupdown_includes(text) is not None) is included


def _params(root: Path, **kw) -> dict:
    return {"interfaces": ROCE, "compute_cidr": ROCE_CIDR, "stack": "auto", "state": "present",
            "etc_root": str(root), "run_root": str(root), "table_base": 100, "priority_base": 1000} | kw


def test_an_unsupported_stack_is_refused_naming_what_was_found_and_the_supported_ones(tmp_path):
    root = _tree(tmp_path, {"etc/NetworkManager/NetworkManager.conf": "[main]\n"})
    _, problem = facts.facts(_params(root))
    assert problem.startswith("rail_network: no supported network stack on this host (found: NetworkManager "
                              "(/etc/NetworkManager/NetworkManager.conf))"), problem
    assert "systemd-networkd, netplan and ifupdown" in problem


def test_a_host_with_no_network_configuration_is_refused_saying_what_was_looked_for(tmp_path):
    _, problem = facts.facts(_params(tmp_path))
    assert "found: no network configuration: no /etc/netplan/*.yaml, no enabled or running systemd-networkd, " \
           "no /etc/network/interfaces" in problem


def test_ifupdown_without_a_source_line_is_refused_and_the_main_file_is_left_alone(tmp_path):
    root = _tree(tmp_path, {"etc/network/interfaces": "auto lo\niface lo inet loopback\n"})
    _, problem = facts.facts(_params(root))
    assert "does not include /etc/network/interfaces.d/railyard-rails" in problem
    assert "add the line 'source /etc/network/interfaces.d/*'" in problem


def test_removal_and_an_empty_interface_list_need_no_supported_stack(tmp_path):
    root = _tree(tmp_path, {"etc/NetworkManager/NetworkManager.conf": "[main]\n",
                            "etc/netplan/60-railyard-rails.yaml": ""})
    result, problem = facts.facts(_params(root, state="absent"))
    assert problem is None and result["existing"]["netplan"] == [str(root / "etc/netplan/60-railyard-rails.yaml")]
    assert facts.facts(_params(root, interfaces=[]))[1] is None


def test_a_forced_stack_skips_detection(tmp_path):
    result, problem = facts.facts(_params(tmp_path, stack="networkd"))
    assert problem is None and result["stack"] == "networkd"
