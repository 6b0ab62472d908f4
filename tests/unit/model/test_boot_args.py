"""boot_args: the kernel arguments a node's next boot must have, which decide whether a host
reboots. They must be exactly what the hugepages and iommu roles write into their drop-ins, so
this renders the roles' own variables with Ansible's templating from each stack's host_vars."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from railyard.model.boot_args import hugepage_args, isolation_args, kernel_args, missing
from railyard.model.plan import make_plan
from railyard.stack import load_stack_file
from railyard.tuning.vars import host_vars

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "playbooks/roles"
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def _trusted(value):
    from ansible.template import trust_as_template

    # Ansible 2.19 templates only strings marked as coming from the role's own files.
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _render(role: str, expression: str, variables: dict) -> str:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    merged = {**yaml.safe_load((ROLES / role / "defaults/main.yml").read_text()), **variables,
              **yaml.safe_load((ROLES / role / "vars/main.yml").read_text())}
    return str(Templar(loader=DataLoader(), variables=_trusted(merged)).template(_trusted(expression))).strip()


@pytest.mark.parametrize("stack", STACKS)
def test_the_planned_kernel_arguments_are_what_the_roles_write(stack):
    spec = load_stack_file(ROOT / f"stacks/Pulumi.{stack}.yaml")
    plan = make_plan(spec)
    node = plan.nodes[-1]
    v = host_vars(spec, plan, node)
    role = []
    if _render("hugepages", "{{ __hugepages_pages | int }}", v) != "0":
        role += _render("hugepages", "{{ __hugepages_cmdline }}", v).split()
    if v["iommu_cpu_vendor"] != "auto":
        role += _render("iommu", "{{ __iommu_params[__iommu_vendor][iommu_mode] }}", v).split()
    if v.get("cpu_isolation_mode") == "kernel":
        role += _render("cpu_isolation", "{{ __cpu_isolation_cmdline }}", v).split()
    assert list(kernel_args(spec, plan, node)) == role


def test_hugepages_per_numa_node_in_the_roles_order_and_none_when_nothing_is_reserved():
    assert hugepage_args("1G", {0: 4, 1: 2}, 0) == ("default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:4,1:2")
    # dictsort orders the (string) node ids as strings: 10 before 2
    assert hugepage_args("2M", {2: 1, 10: 1}, 0)[-1] == "hugepages=10:1,2:1"
    assert hugepage_args("1G", {}, 8)[-1] == "hugepages=8"
    assert hugepage_args("1G", {0: 0}, 0) == () and hugepage_args("1G", {}, 0) == ()


def test_missing_names_what_the_running_kernel_lacks():
    wanted = ("hugepagesz=1G", "hugepages=0:4,1:2", "intel_iommu=on", "iommu=pt")
    assert missing(wanted, "BOOT_IMAGE=/vmlinuz ro intel_iommu=on hugepagesz=1G hugepages=0:4,1:2 iommu=pt") == []
    assert missing(wanted, "ro hugepagesz=1G hugepages=0:2,1:2") == ["hugepages=0:4,1:2", "intel_iommu=on", "iommu=pt"]


def test_a_hypervisors_cpu_isolation_is_what_its_role_writes_and_only_under_the_kernel_mode():
    from tests.roles.test_roles_cpu_isolation import planned

    spec, plan, node = planned("kernel")
    v = host_vars(spec, plan, node)
    wanted = kernel_args(spec, plan, node)
    role = _render("cpu_isolation", "{{ __cpu_isolation_cmdline }}", v).split()
    assert [a for a in wanted if a.split("=")[0] in ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity")] == role
    # The systemd mode puts nothing on the command line.
    from dataclasses import replace

    assert isolation_args(replace(plan.tuning(node).cpu_isolation, mode="systemd")) == ()
