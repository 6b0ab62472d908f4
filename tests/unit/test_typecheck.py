"""mypy over the program: railyard/ and components/ type-check with no error, under the settings
in pyproject.toml ([tool.mypy]).

The region drivers matter most: their provider plugins cannot be built here, so no engine ever
sends their resources to a provider, and a misspelt or missing property would otherwise wait for a
real cloud to be found. mypy reads the SDKs' signatures (pinned in pyproject.toml) and the drivers'
calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The region drivers, and the layer's Helm release of Kueue (CoreWeave's chart), which no engine
# here runs either.
DRIVERS = ["railyard/drivers/coreweave", "railyard/drivers/openstack", "components/kubernetes.py"]


def mypy(*targets: str) -> subprocess.CompletedProcess[str]:
    """mypy with pyproject.toml's settings (untyped bodies checked, the cache under .railyard/) over
    `targets`, or over its `files` (railyard and components) when none are given."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary", *targets],
        cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_railyard_and_components_type_check_with_no_errors():
    proc = mypy()
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_region_drivers_type_check_against_the_sdks():
    proc = mypy(*DRIVERS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_misspelt_or_missing_property_fails_the_check(tmp_path):
    bad = tmp_path / "bad_driver.py"
    bad.write_text(
        "import pulumi_coreweave as coreweave\n"
        "import pulumi_openstack as openstack\n"
        "coreweave.CksCluster('c', zone='US-EAST-04A', verison='1.32', vpc_id='v', pod_cidr_name='p',\n"
        "                     service_cidr_name='s', internal_lb_cidr_names=['l'])\n"
        "openstack.networking.Port('p', network_id='n', binding=openstack.networking.PortBindingArgs(vnictype='direct'))\n"
        "coreweave.ObjectStorageBucketPolicyArgs(bucket='b')\n")
    proc = mypy(str(bad))
    assert proc.returncode != 0
    assert 'Unexpected keyword argument "verison"' in proc.stdout, proc.stdout
    assert 'Unexpected keyword argument "vnictype"' in proc.stdout, proc.stdout
    assert 'Missing named argument "policy"' in proc.stdout, proc.stdout
