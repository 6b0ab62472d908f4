"""What the lab driver loads into the Pulumi program: every module is imported on every preview,
before the first resource is registered."""

import ipaddress
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def _program(code: str) -> str:
    """What `code` prints, run in a fresh interpreter at the project's root (nothing imported yet)."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_lab_stack_without_kubernetes_never_loads_the_control_plane():
    # Its PKI and cryptography's x509 were 50 ms of every preview's imports.
    loaded = _program("import sys; from railyard.stack import load; from railyard.drivers.base import load_driver; "
                      "spec, plan = load('stacks/Pulumi.lab.yaml'); load_driver(spec, plan); "
                      "print('railyard.drivers.lab.control_plane' in sys.modules)")
    assert loaded.strip() == "False"


def test_a_stack_with_kubernetes_still_gets_its_control_plane_on_its_own_ranges():
    # The import moved into kubeconfig(): the one path that needs it must still reach it.
    out = _program("import json; from unittest import mock; from railyard.stack import load; "
                   "from railyard.drivers.base import load_driver; from railyard.drivers.lab import resources; "
                   "spec, plan = load('stacks/Pulumi.lab-k8s.yaml'); driver = load_driver(spec, plan); "
                   "resources.LabControlPlane = mock.Mock(); driver.kubeconfig('k', None, []); "
                   "kw = resources.LabControlPlane.call_args.kwargs; "
                   "nets = [plan.networks.management.cidr, plan.networks.storage.cidr, plan.networks.compute.cidr]; "
                   "print(json.dumps([kw['service_cidr'], kw['pod_cidr'], nets]))")
    service, pods, nets = json.loads(out)
    ranges = [ipaddress.ip_network(service), ipaddress.ip_network(pods)]
    assert not any(r.overlaps(ipaddress.ip_network(n)) for r in ranges for n in nets)
