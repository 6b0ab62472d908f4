"""Power control through a BMC, end to end on the real engine: a lab node stands in for a server,
and sushy-tools' Redfish emulator (its fake driver, on 127.0.0.1 over HTTPS) for the server's BMC.
The emulator's external notifier tells the test of every power change of the fake system, and
the test presses the lab node's power button accordingly (railyard/drivers/lab/node/power.py),
as a BMC's reset would cut and restore a server's power.

The stack's reboot command is `systemctl poweroff`: the node goes off and stays off, so it comes
back only if the rollout power-cycles it through its BMC. (The emulator's and the notifier's
traffic stays on loopback; SSH goes to the lab's own namespaces.)"""

from __future__ import annotations

import copy
import json
import subprocess
import time

import pytest
import yaml

from railyard import paths
from railyard.drivers.hosts import redfish
from railyard.drivers.lab import hwtree, node
from railyard.drivers.lab.node import power
from railyard.engine.state_types import is_dynamic
from railyard.model.catalog import load_catalog
from tests.unit.drivers.hosts.redfish_emulator import PASSWORD, USERNAME, Emulator, Notifier, fake_system

from .stack_project import StackProject

ROOT = paths.PROJECT_ROOT
STACK = "tredfish"
SERVER = "srv-0"
SYSTEM = "4d0c5e1a-7f3e-4c1b-9a59-0e2a3b6c7d81"
TIMEOUT = 20  # reboot.timeoutSeconds: the wait before the power cycle, and again after it


class Button:
    """What the BMC's power changes do to the lab node: the fake system's Off cuts its power, its
    On turns it on; `lost` drops them (a reset that does not reach the server)."""

    def __init__(self, stack: str):
        self.stack = stack
        self.lost = False
        self.pressed: list[dict] = []

    def __call__(self, system: str, state: str) -> None:
        assert system == SERVER, system
        if self.lost:
            return
        if state == "Off" and power.boot_id(self.stack, SERVER) is None:
            return  # already off: a ForceOff of a server that is off changes nothing
        what = "poweron" if state == "On" else "poweroff"
        self.pressed.append({"time": time.time(), "what": what})
        power.request(self.stack, SERVER, what)


@pytest.fixture(scope="module")
def server(stack_factory, tmp_path_factory):
    """One dgx-h100 lab node on all eight rails: the server the stack names."""
    from railyard.stack import from_config

    c = stack_factory("rf", rails=8, spine=False)
    c.create_fabric()
    address = c.node_args(0)["mgmt"]["address"].split("/")[0]
    # Planned before the node exists, so before its key does.
    _, plan = from_config(stack_config(c, [{"address": address}], pinned=False), STACK)
    tree = tmp_path_factory.mktemp("hw") / SERVER
    hwtree.build_hwtree(load_catalog().nodes["dgx-h100"], tree)
    # The rails as the plan names them, without addresses: the host's own network files give them.
    rails = [{"name": n.netdev, "rail": n.rail, "address": None} for n in plan.nodes[0].nics]
    c.create_node(SERVER, 0, hw_tree_source=str(tree), rails=rails)
    return c


@pytest.fixture(scope="module")
def bmc(server, tmp_path_factory):
    """The emulator (one fake system, the server's) and its notifier, pressing the server's
    power button; both stopped at the end whatever happened."""
    button = Button(server.stack)
    notifier = Notifier(on_power=button)
    try:
        emulator = Emulator(tmp_path_factory.mktemp("bmc"), [fake_system(SYSTEM, SERVER, notify=True)], notifier.url)
    except BaseException:
        notifier.stop()
        raise
    emulator.button, emulator.notifier = button, notifier
    yield emulator
    emulator.stop()
    notifier.stop()


def stack_config(c, hosts: list[dict], pinned: bool = True) -> dict:
    return {
        "railyard:region": "onprem-lab",
        "railyard:layout": "bare-metal",
        "railyard:driver": "hosts",
        "railyard:protect": False,
        "railyard:nodePools": [{"name": "gpu", "sku": "dgx-h100", "count": 1}],
        "railyard:fabric": {
            "compute": {"kind": "infiniband", "speed": "ndr", "switch": "qm9700", "cidr": "198.19.0.0/16"},
            "storage": {"cidr": "198.18.96.0/20"},
            "management": {"cidr": c.mgmt_cidr},
        },
        # The lab's kernel has no md: the cache is one drive (the default, raid0, is refused there).
        # The stand-in servers' fabric ports are the fixture's plain veths (MTU 1500), not the
        # planned fabric: acceptance's MTU pings are proven on lab stacks (test_lab_acceptance.py).
        "railyard:acceptance": {"enabled": False},
        "railyard:storage": {"localCache": {"raid": "none"}},
        "railyard:tuning": {"hugepages": {"size": "1G", "percentOfMemory": 1, "perNuma": True},
                            "sriov": {"vfsPerPf": 0}},
        "railyard:hosts": {
            "sshKey": "agent",
            "hostKeys": "pinned" if pinned else "trust-on-first-use",
            "reboot": {"command": "systemctl poweroff", "timeoutSeconds": TIMEOUT},
            "pools": {"gpu": {"hosts": hosts}},
        },
    }


@pytest.fixture(scope="module")
def project(server, bmc, tmp_path_factory):
    if not (paths.bin_dir(ROOT) / "pulumi").exists():
        pytest.fail("the Pulumi toolchain is not set up: run `make toolchain`")
    state = node.read_node(server.stack, SERVER)
    host = {"address": state["mgmt_address"], "hostKey": state["host_key"],
            "bmc": {"endpoint": bmc.endpoint, "username": USERNAME, "verify": str(bmc.ca)}}
    p = StackProject(tmp_path_factory.mktemp("redfishstack"), STACK, stack_config(server, [host]))
    p.pulumi("stack", "init", "--secrets-provider", "passphrase")
    for path, value in (("railyard:hosts.sshKey", server.key.read_text()),
                        ("railyard:hosts.pools.gpu.hosts[0].bmc.password", PASSWORD)):
        # From stdin: the key's first line starts with '-', which `config set` would take for a flag.
        subprocess.run(p.argv("config", "set", "--secret", "--path", path), cwd=p.dir, env=p.env, input=value,
                       text=True, check=True, capture_output=True)
    p.config = yaml.safe_load(paths.stack_file(STACK, p.dir).read_text())["config"]
    assert PASSWORD not in paths.stack_file(STACK, p.dir).read_text()
    yield p
    if power.boot_id(server.stack, SERVER) is None:
        power.request(server.stack, SERVER, "poweron")
        wait_booted(server)
    p.write(p.config)
    p.pulumi("destroy", "--yes", "--skip-preview", check=False)


def wait_booted(c, within: float = 60) -> str:
    deadline = time.monotonic() + within
    while (boot := power.boot_id(c.stack, SERVER)) is None:
        assert time.monotonic() < deadline, f"{SERVER} did not boot within {within:g} s"
        time.sleep(0.5)
    return boot


def dynamic_outputs(p) -> list[dict]:
    """The outputs of the stack's dynamic resources, as state holds them."""
    state = json.loads(p.checkpoint().read_text())
    return [r.get("outputs") or {} for r in state["checkpoint"]["latest"]["resources"]
            if is_dynamic(r["type"])]


def test_a_host_powered_off_by_its_reboot_is_brought_back_by_its_bmc(server, bmc, project):
    booted = wait_booted(server)
    before = len(power.events(server.stack, SERVER))
    notes_before = len(bmc.notifier.notes)
    proc = project.pulumi("up", "--yes", "--skip-preview", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"gpu-0 did not come back within {TIMEOUT} s of `systemctl poweroff`; power-cycling it through its " \
           "BMC" in out, out[-4000:]
    assert "gpu-0: back after its BMC reset it (ForceRestart)" in out, out[-4000:]
    assert PASSWORD not in out

    # The emulator was asked for a ForceRestart: its system went Off with the restart pending,
    # then On, and reads On now.
    notes = bmc.notifier.notes[notes_before:]
    assert [(n["power_state"], n["pending"]) for n in notes] == [("Off", "ForceRestart"), ("On", None)], notes
    assert "ComputerSystem.Reset" in bmc.log() and not bmc.notifier.failures, bmc.notifier.failures
    assert redfish.Client(bmc.bmc("gpu-0")).power_state() == "On"

    # The node went off by its own `systemctl poweroff`, stayed off for the whole timeout, and
    # its only power-on since came from the notifier, after the emulator received the reset; the
    # boot it runs now is that power-on's.
    events = power.events(server.stack, SERVER)[before:]
    assert [(e["event"], e["why"]) for e in events] == [("off", "poweroff"), ("on", "poweron")], events
    (press,) = bmc.button.pressed
    assert press["what"] == "poweron"
    # (The wait starts as the reboot command's connection drops, a moment before the off is logged:
    # 1.5 s later on a machine at a load of 20, so 5 s of slack.)
    assert events[0]["time"] + TIMEOUT - 5 <= notes[0]["time"] <= press["time"] <= events[1]["time"]
    now = power.boot_id(server.stack, SERVER)
    assert now != booted and now == events[1]["boot_id"]
    assert "hugepages=" in node.run_in_node(server.stack, SERVER, ["cat", "/proc/cmdline"], check=True).stdout

    # State: the host's power state as its BMC reported it, the reboot the BMC finished, and the
    # password only as ciphertext.
    outputs = dynamic_outputs(project)
    (machine,) = [o for o in outputs if "facts" in o and o.get("node") == "gpu-0"]
    assert machine["power_state"] == "On"
    (reboots,) = [o for o in outputs if "reboots" in o]
    assert [(r["node"], r.get("bmc_reset")) for r in reboots["reboots"]] == [("gpu-0", "ForceRestart")]
    assert PASSWORD not in project.checkpoint().read_text()


def test_a_host_its_bmc_does_not_bring_back_stops_the_rollout_naming_it(server, bmc, project):
    wait_booted(server)
    before = len(power.events(server.stack, SERVER))
    notes_before = len(bmc.notifier.notes)
    config = copy.deepcopy(project.config)
    config["railyard:tuning"]["hugepages"]["percentOfMemory"] = 2  # a new reservation: a reboot is needed
    project.write(config)
    bmc.button.lost = True
    try:
        proc = project.pulumi("up", "--yes", "--skip-preview", check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-4000:]
        assert f"gpu-0 did not come back within {TIMEOUT} s of `systemctl poweroff`, nor within {TIMEOUT} s of " \
               "being power-cycled through its BMC (ForceRestart); the rollout stopped" in out, out[-4000:]
        assert PASSWORD not in out
        # The reset reached the emulator, once; the node saw none of it and is still off.
        notes = bmc.notifier.notes[notes_before:]
        assert [(n["power_state"], n["pending"]) for n in notes] == [("Off", "ForceRestart"), ("On", None)], notes
        assert [e["event"] for e in power.events(server.stack, SERVER)[before:]] == ["off"]
        assert power.boot_id(server.stack, SERVER) is None
    finally:
        bmc.button.lost = False
        project.write(project.config)
        if power.boot_id(server.stack, SERVER) is None:
            power.request(server.stack, SERVER, "poweron")
            wait_booted(server)


def test_the_repair_loops_reset_power_cycles_a_host_that_answers_no_ssh(server, bmc, project, monkeypatch):
    """The repair loop's reset of a hung server (railyard.repair's reset: rollout.reboot with the
    hosts driver's power cycle): the server is off, so SSH reaches no one and the reboot command
    cannot run; its BMC is asked instead, with the password the real engine opens from the stack's
    own config, and the server is back with a new boot."""
    from railyard import drivers
    from railyard.remote import rollout
    from railyard.remote.ssh import Target
    from railyard.stack import load

    booted = wait_booted(server)
    state = node.read_node(server.stack, SERVER)  # its address and host key, as the inventory has them
    power.request(server.stack, SERVER, "poweroff")
    deadline = time.monotonic() + 30
    while power.boot_id(server.stack, SERVER) is not None:
        assert time.monotonic() < deadline, f"{SERVER} did not power off"
        time.sleep(0.5)
    notes_before = len(bmc.notifier.notes)
    # As `railyard verify --repair` runs in the project: the real engine, in the project's copy
    # (where the stack file is; the lab's runtime stays where the server's is), with its backend
    # and passphrase.
    from railyard.engine import pulumi

    opened = pulumi.run
    monkeypatch.setattr(pulumi, "run", lambda args, **kw: opened(args, root=project.dir, **kw))
    for key in ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE"):
        monkeypatch.setenv(key, project.env[key])
    spec, plan = load(paths.stack_file(STACK, project.dir))
    cycle = drivers.power_cycle(spec, plan, "gpu-0")
    assert cycle is not None
    target = Target("gpu-0", state["mgmt_address"], host_keys=(state["host_key"],))
    said: list[str] = []
    done = rollout.reboot(target, command="systemctl poweroff", timeout=TIMEOUT, private_key=server.key.read_text(),
                          progress=said.append, power_cycle=cycle)
    assert done["bmc_reset"] == "ForceRestart", said
    assert said[0].startswith("gpu-0 does not answer SSH (") and said[0].endswith("); power-cycling it through its BMC")
    assert said[-1] == "gpu-0: back after its BMC reset it (ForceRestart)"
    assert not any(PASSWORD in line for line in said)
    notes = bmc.notifier.notes[notes_before:]
    assert [(n["power_state"], n["pending"]) for n in notes] == [("Off", "ForceRestart"), ("On", None)], notes
    now = power.boot_id(server.stack, SERVER)
    assert now is not None and now != booted
