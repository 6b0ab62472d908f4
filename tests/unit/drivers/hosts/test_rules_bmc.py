"""A listed host's `bmc` (Redfish power control): parsed into config.Bmc, and every bad value
refused with its config path, the password never shown."""

from __future__ import annotations

import copy
import re

import pytest

from railyard.drivers.hosts.config import Bmc
from railyard.model.errors import SpecError
from railyard.model.spec import Secret
from railyard.stack import parse_config

from .test_rules import WEIRD, H, config, hosts_config, hosts_of, problems

CIPHER = "v1:BMCPASSWORDCIPHER"
HOST0 = f"{H}.pools.gpu.hosts[0].bmc"


def bmc(**keys) -> dict:
    out = {"endpoint": "https://192.0.2.101", "username": "admin", "password": {"secure": CIPHER}}
    for k, v in keys.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def with_bmc(*bmcs: dict | None) -> dict:
    cfg = config()
    for host, b in zip(hosts_of(cfg), bmcs):
        if b is not None:
            host["bmc"] = b
    return cfg


def test_a_hosts_bmc_is_parsed_with_its_password_kept_opaque():
    hosts = hosts_config(with_bmc(bmc(endpoint="https://BMC-0.example.net:8443/", systemId=1), None)).hosts
    b = hosts[0].bmc
    assert b == Bmc(endpoint="https://bmc-0.example.net:8443", username="admin", password=Secret(CIPHER),
                    password_at=("pools", "gpu", "hosts", 0, "bmc", "password"), verify=True, system_id="1")
    assert hosts[1].bmc is None
    assert CIPHER not in repr(b) and "password" not in b.resource_input()


def test_the_default_port_and_an_ipv6_endpoint_are_written_one_way():
    hosts = hosts_config(with_bmc(bmc(endpoint="https://[2001:DB8::0B]:443"),
                                  bmc(endpoint="https://192.0.2.102:443"))).hosts
    assert [h.bmc.endpoint for h in hosts] == ["https://[2001:db8::b]", "https://192.0.2.102"]


def test_verify_is_on_by_default_and_may_be_off_or_a_ca_file(tmp_path, monkeypatch):
    from railyard.drivers.lab.control_plane import pki

    pki.ensure_ca(tmp_path, "test CA")
    monkeypatch.setattr("railyard.paths.project_root", lambda: tmp_path)
    hosts = hosts_config(with_bmc(bmc(verify=False), bmc(endpoint="https://192.0.2.102", verify="ca.crt"))).hosts
    assert hosts[0].bmc.verify is False and hosts[1].bmc.verify == str(tmp_path / "ca.crt")


def _pem_without_a_certificate(c, tmp_path):
    (tmp_path / "junk.pem").write_text("-----BEGIN NOTHING-----\n")
    hosts_of(c)[0]["bmc"] = bmc(verify=str(tmp_path / "junk.pem"))


BAD = {
    "endpoint_missing": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(endpoint=None)), f"{HOST0}.endpoint",
                         "this key is required"),
    "endpoint_over_http": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(endpoint="http://192.0.2.101")),
                           f"{HOST0}.endpoint", "served over HTTPS"),
    "endpoint_with_a_path": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(endpoint="https://192.0.2.101/redfish/v1")),
                             f"{HOST0}.endpoint", "found by itself"),
    "endpoint_not_an_address": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(endpoint="https://192.0.2.300")),
                                f"{HOST0}.endpoint", "https://address[:port]"),
    "endpoint_port_out_of_range": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(endpoint="https://192.0.2.1:70000")),
                                   f"{HOST0}.endpoint", "1-65535"),
    "username_missing": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(username=None)), f"{HOST0}.username",
                         "required"),
    "username_with_colon": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(username="ad:min")), f"{HOST0}.username",
                            "no ':'"),
    "password_missing": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(password=None)), f"{HOST0}.password",
                         "pulumi config set --secret --path 'hosts.pools.gpu.hosts[0].bmc.password'"),
    "password_of_no_ciphertext": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(password={"secure": ""})),
                                  f"{HOST0}.password", "no ciphertext"),
    "verify_quoted": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(verify="false")), f"{HOST0}.verify",
                      "without quotes"),
    "verify_no_such_file": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(verify=str(t / "nope.pem"))),
                            f"{HOST0}.verify", "no such file"),
    "verify_not_a_ca": (_pem_without_a_certificate, f"{HOST0}.verify", "no CA certificate could be read"),
    "system_id_a_path": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(systemId="/redfish/v1/Systems/1")),
                         f"{HOST0}.systemId", "last part of its @odata.id"),
    "unknown_key": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(user="admin")), f"{HOST0}.user",
                    "did you mean username?"),
    "not_a_mapping": (lambda c, t: hosts_of(c)[0].update(bmc="https://192.0.2.101"), HOST0, "a mapping"),
    "a_secret_elsewhere_in_it": (lambda c, t: hosts_of(c)[0].update(bmc=bmc(username={"secure": "v1:c"})),
                                 f"{HOST0}.username", "bmc.password may be secrets"),
    "one_system_for_two_hosts": (lambda c, t: [h.update(bmc=bmc()) for h in hosts_of(c)],
                                 f"{H}.pools.gpu.hosts[1].bmc", "give each host its bmc.systemId"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_bmc_input_is_one_problem_at_its_path(name, tmp_path):
    edit, path, hint = BAD[name]
    cfg = config()
    edit(cfg, tmp_path)
    (problem,) = problems(cfg)
    assert problem.path == path, problem
    assert hint in f"{problem.found} {problem.allowed} {problem.hint}", problem
    assert problem.found and problem.allowed
    assert CIPHER not in str(problem)


def test_two_hosts_on_one_bmc_with_their_own_system_ids_are_two_systems():
    hosts = hosts_config(with_bmc(bmc(systemId="1"), bmc(systemId="2"))).hosts
    assert [h.bmc.system_id for h in hosts] == ["1", "2"]


@pytest.mark.parametrize("cfg", [with_bmc(bmc(password="hunter2-plain")),
                                 with_bmc(bmc(endpoint="https://admin:hunter2-plain@192.0.2.101"))],
                         ids=["password", "url"])
def test_a_plain_text_password_is_refused_and_never_shown(cfg):
    (problem,) = problems(cfg)
    assert "hunter2-plain" not in str(problem) and "written in the clear" in problem.hint
    assert problem.path in (f"{HOST0}.password", f"{HOST0}.endpoint")


@pytest.mark.parametrize("key_path", ["bmc", "bmc.endpoint", "bmc.username", "bmc.password", "bmc.verify",
                                      "bmc.systemId"])
def test_any_value_in_a_bmc_gives_a_config_or_problems_never_a_crash(key_path):
    for value in WEIRD:
        cfg = with_bmc(bmc())
        node = hosts_of(cfg)[0]
        *parents, last = key_path.split(".")
        for p in parents:
            node = node[p]
        node[last] = copy.deepcopy(value)
        try:
            parse_config(cfg, "t")
        except SpecError as err:
            assert all(p.found and p.allowed for p in err.problems), (key_path, value)
            assert not re.search(r"v1:c|BMCPASSWORDCIPHER", str(err)), (key_path, value)
