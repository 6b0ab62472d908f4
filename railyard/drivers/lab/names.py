"""Names of every Linux object the lab creates, derived from the stack and node names only.

Names are API: `gc` finds a stack's objects by them after a lost state, and a second `create`
adopts an object because its name is predictable. So every name here is a pure function of its
inputs, and a stack's objects all start with ``stack_prefix(stack)``.

Several lab stacks run side by side, so each stack gets a short tag. The tag holds only
``[a-z0-9]``; the separator after it is ``-``, so ``ry-lab-`` can never be a prefix of another
stack's ``ry-lab2-``/``ry-labx-`` names. Interface names must fit IFNAMSIZ (15 characters); only
the host's management veth lives in the root namespace, every other interface lives in a namespace
of its stack, so names there only need to be unique within that namespace.

Layout of one stack with tag ``T``:

    netns  ry-T-fabric        bridges rail0..railN-1, storage, mgmt; ports <nodetag>-r<i>,
                              <nodetag>-s, <nodetag>-m, spine<i>, host
    netns  ry-T-spine         links rail<i> holding each rail's gateway
    netns  ry-T-sw-<switch>   a RoCE switch routing with FRR (routers.py): its ports swp<..> (veths
                              to its neighbours' ports), a leaf's bridge `hosts`
    netns  ry-T-n-<node>      one per node, and one per VM (vm.py: a VM is a node with VFs); the
                              NICs carry the names the caller gives (the SKU's real netdev names
                              such as ibp24s0)
    netns  ry-T-storage       the object store (storage/object_store.py): link s3, fabric port s3 on storage
    netns  ry-T-k8s           the Kubernetes control plane (control_plane/): link k8s, fabric port k8s on mgmt
    link   ry-T-mgmt          in the root namespace: the host's one veth into the stack
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from pathlib import Path
from typing import Literal, cast

from railyard import paths
from railyard.drivers.lab.errors import LabError
from railyard.model.mac import hashed_mac

# The lab builds its networks on this very machine; 198.18.0.0/15 (RFC 2544, benchmarking) is routed
# by no real network, so a lab stack can never shadow a route the host depends on.
LAB_RANGE = ipaddress.IPv4Network("198.18.0.0/15")

IFNAMSIZ = 15  # the kernel's limit on an interface name, without the trailing NUL

PREFIX = "ry"

_READABLE_TAG = re.compile(r"[a-z0-9]{1,6}")
_STACK = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# A node's name is also its hostname, so it follows the rules for one DNS label.
_NODE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")

MGMT_BRIDGE = "mgmt"
STORAGE_BRIDGE = "storage"
HOST_PORT = "host"  # the fabric end of the host's veth, on the mgmt bridge
# The object store's veth, both ends (its fabric end on the storage bridge). No node port ends
# like this (they end -s, -m or -r<i>), and no bridge or spine port is called so.
OBJECT_STORE_PORT = "s3"
# The control plane's veth, both ends (its fabric end on the mgmt bridge); named like no node port.
CONTROL_PLANE_PORT = "k8s"


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def check_stack(stack: str) -> str:
    if not _STACK.fullmatch(stack or ""):
        raise LabError(f"stack {stack!r}", "a stack name is 1-100 of A-Z a-z 0-9 _ . -")
    return stack


def stack_tag(stack: str) -> str:
    """A short, stable tag for the stack: the name itself when it is 1-6 of [a-z0-9] (``lab``),
    else up to three of its letters and four hex digits of its hash (``lab-virtual`` → ``lab`` +
    hash). Hashed tags are always seven characters, readable ones at most six, so the two kinds
    never collide."""
    check_stack(stack)
    if _READABLE_TAG.fullmatch(stack):
        return stack
    letters = re.sub(r"[^a-z0-9]", "", stack.lower())[:3].ljust(3, "x")
    return letters + _digest(stack, 4)


def stack_prefix(stack: str) -> str:
    """Every netns and root-namespace link of the stack starts with this."""
    return f"{PREFIX}-{stack_tag(stack)}-"


def fabric_ns(stack: str) -> str:
    return stack_prefix(stack) + "fabric"


def spine_ns(stack: str) -> str:
    return stack_prefix(stack) + "spine"


def storage_ns(stack: str) -> str:
    """The object store's namespace (storage/object_store.py); also the object store's id."""
    return stack_prefix(stack) + "storage"


def control_plane_ns(stack: str) -> str:
    """The Kubernetes control plane's namespace (control_plane/); also its id."""
    return stack_prefix(stack) + "k8s"


def switch_ns(stack: str, switch: str) -> str:
    """A RoCE switch routing with FRR (routers.py): its netns, also its FRR pathspace's owner."""
    return stack_prefix(stack) + "sw-" + check_node(switch)


def pfs_id(stack: str) -> str:
    """The id of the stack's parallel-FS share (a directory, storage/parallel_fs.py); not a namespace."""
    return stack_prefix(stack) + "pfs"


def check_node(node: str) -> str:
    if not _NODE.fullmatch(node or ""):
        raise LabError(
            f"node {node!r}",
            "a node name is its hostname: 1-63 of a-z 0-9 and '-', not starting or ending with '-'",
        )
    return node


def node_ns(stack: str, node: str) -> str:
    return stack_prefix(stack) + "n-" + check_node(node)


def host_link(stack: str) -> str:
    """The host's end of the stack's management veth, in the root namespace."""
    return check_ifname(stack_prefix(stack) + "mgmt")


def init_marker(stack: str, node: str) -> str:
    """argv[0] of a node's init process, so `ps` and `gc` can tell whose it is."""
    return f"{stack_prefix(stack)}init:{check_node(node)}"


def mount_marker(stack: str, node: str) -> str:
    """The source name of a node's /run tmpfs: every process of the node sees it in its mount
    table, so `gc` and `delete` find them all by it (see proc.by_mount_source)."""
    return f"{stack_prefix(stack)}node:{check_node(node)}"


def switch_mount_marker(stack: str, switch: str) -> str:
    """The source name of the /run tmpfs a switch's lldpd runs under (routers.py). lldpd writes its
    process titles over its environment, and with it the ENV_MARKER, so `gc` finds an orphaned
    one by this; parse_mount_marker() gives SWITCH_MARKER + the switch's name."""
    return f"{stack_prefix(stack)}node:{SWITCH_MARKER}{check_node(switch)}"


def parse_mount_marker(stack: str, source: str) -> str | None:
    prefix = stack_prefix(stack) + "node:"
    return source[len(prefix):] if source.startswith(prefix) else None


# Every namespace of a stack (on its `lo`) and the host's management veth carry this as their
# interface alias: which stack made them, from which checkout. `lab gc --all` removes only what
# carries its own checkout's marker (or lies under its own lab directory), so one checkout never
# collects another's lab, nor a test's project copy's. The kernel holds an alias with the object
# it names, so the marker goes when the object does.
IFALIASZ = 255
_OWNER = "railyard:"


# What a root may hold to be written as it is: the marker travels through `ip -batch`, which
# splits on blanks and drops everything after a '#'.
_PLAIN_ROOT = re.compile(r"[A-Za-z0-9_./+-]+")


def owner_marker(stack: str, root: str) -> str:
    """``railyard:<stack>:<checkout root>``; a root too long for an alias, or holding anything but
    ``[A-Za-z0-9_./+-]``, is replaced by its hash."""
    text = f"{_OWNER}{check_stack(stack)}:{root}"
    if len(text.encode()) > IFALIASZ or not _PLAIN_ROOT.fullmatch(root):
        text = f"{_OWNER}{stack}:sha256-{_digest(root, 32)}"
    return text


def owner(stack: str, root: Path | None = None) -> str:
    """This checkout's marker for the stack's objects (the project root as the lab sees it)."""
    return owner_marker(stack, str(root or paths.project_root()))


def parse_owner_marker(text: str | None) -> tuple[str, str] | None:
    """(stack, root as the marker holds it) of an alias owner_marker wrote, else None."""
    if not text or not text.startswith(_OWNER):
        return None
    stack, sep, root = text[len(_OWNER):].partition(":")
    return (stack, root) if sep and _STACK.fullmatch(stack) and root else None


def parse_tag(name: str) -> str | None:
    """The stack tag of a lab netns or root-namespace link name (``ry-<tag>-…``), else None."""
    m = re.fullmatch(rf"{PREFIX}-([a-z0-9]{{1,7}})-.+", name)
    return m.group(1) if m else None


ENV_MARKER = "RAILYARD_LAB"  # every node process started by the lab carries RAILYARD_LAB=<tag>:<node>


def env_marker(stack: str, node: str) -> str:
    return f"{stack_tag(stack)}:{check_node(node)}"


STORAGE_MARKER = "@storage"  # the env marker's part after the tag for the object store's processes; no node name starts with @


def storage_env_marker(stack: str) -> str:
    return f"{stack_tag(stack)}:{STORAGE_MARKER}"


CONTROL_PLANE_MARKER = "@k8s"  # the same for the control plane's processes
SWITCH_MARKER = "@sw-"  # and, followed by the switch's name, for a switch's FRR (routers.py)


def switch_marker(stack: str, switch: str) -> str:
    return f"{stack_tag(stack)}:{SWITCH_MARKER}{check_node(switch)}"


def switches_id(stack: str) -> str:
    """The id of the stack's routed switches (routers.py), one object: not a namespace."""
    return stack_prefix(stack) + "switches"


def control_plane_env_marker(stack: str) -> str:
    return f"{stack_tag(stack)}:{CONTROL_PLANE_MARKER}"


ServiceNs = Literal["fabric", "spine", "storage", "k8s"]


def parse_ns(stack: str, netns: str) -> (tuple[Literal["node", "switch"], str] | tuple[ServiceNs, None]
                                         | None):
    """("fabric"|"spine"|"storage"|"k8s", None), ("node", name) (a VM's is a node's) or ("switch",
    name) for a netns of the stack, else None."""
    prefix = stack_prefix(stack)
    if not netns.startswith(prefix):
        return None
    rest = netns[len(prefix):]
    if rest in ("fabric", "spine", "storage", "k8s"):
        return cast(ServiceNs, rest), None
    if rest.startswith("n-") and _NODE.fullmatch(rest[2:]):
        return "node", rest[2:]
    if rest.startswith("sw-") and _NODE.fullmatch(rest[3:]):
        return "switch", rest[3:]
    return None


def node_tag(node: str) -> str:
    """The node's part of its fabric port names: the name itself up to nine characters, else its
    first five and five hex digits of its hash (always ten, so the two kinds never collide)."""
    check_node(node)
    if len(node) <= 9:
        return node
    return node[:5] + _digest(node, 5)


def rail_bridge(rail: int) -> str:
    return f"rail{_rail(rail)}"


def spine_port(rail: int) -> str:
    """The fabric end of the spine's link to a rail, on that rail's bridge."""
    return f"spine{_rail(rail)}"


def spine_link(rail: int) -> str:
    """The spine's end of its link to a rail; it holds the rail's gateway address."""
    return f"rail{_rail(rail)}"


def node_port(node: str, role: str | int) -> str:
    """The fabric end of a node's NIC: ``<nodetag>-r<i>`` for rail i, ``-s`` storage, ``-m`` mgmt.

    The suffix always starts at the last ``-`` and is one of r<digits>, s, m, while bridge and
    spine names never end that way, so no two objects in a fabric namespace share a name.
    """
    if isinstance(role, int):
        suffix = f"r{_rail(role)}"
    elif role in ("storage", "mgmt"):
        suffix = role[0]
    else:
        raise LabError(f"node {node} port {role!r}", "a port role is a rail number, 'storage' or 'mgmt'")
    return check_ifname(f"{node_tag(node)}-{suffix}")


def mac(*parts: str) -> str:
    """A stable, locally administered unicast MAC for a lab interface named by `parts`.

    A re-created interface keeps its MAC, so neighbours' ARP caches (the host's, the spine's)
    stay right instead of sending to the old interface's address until their entries expire.
    """
    return hashed_mac(*parts)


def check_ifname(name: str) -> str:
    if not _IFNAME.fullmatch(name or "") or name in (".", ".."):
        raise LabError(f"link {name!r}", f"an interface name is 1-{IFNAMSIZ} of A-Z a-z 0-9 _ . -")
    return name


def _rail(rail: int) -> int:
    if not isinstance(rail, int) or isinstance(rail, bool) or not 0 <= rail < 100:
        raise LabError(f"rail {rail!r}", "a rail number is an integer from 0 to 99")
    return rail
