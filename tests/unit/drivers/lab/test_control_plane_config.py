"""The lab control plane's configuration, without starting it: Kueue's webhooks by URL, the
cluster's virtual ranges, and the CA and certificates (kept, or issued again when they no longer
fit)."""

from __future__ import annotations

import base64
import ipaddress

from cryptography import x509

from railyard.drivers.lab import control_plane
from railyard.drivers.lab.control_plane import pki


def test_kueue_webhooks_are_called_by_url_on_the_api_servers_address_with_the_stacks_ca():
    hooks = control_plane.kueue_webhooks("198.18.15.254", b"-----BEGIN CERTIFICATE-----\nCA\n")
    assert [h["metadata"]["name"] for h in hooks] == ["kueue-mutating-webhook-configuration",
                                                       "kueue-validating-webhook-configuration"]
    every = [w for h in hooks for w in h["webhooks"]]
    assert {w["name"] for w in every} >= {"mjob.kb.io", "vjob.kb.io", "mclusterqueue.kb.io"}
    for w in every:
        assert w["clientConfig"]["url"].startswith("https://198.18.15.254:9443/")
        assert base64.b64decode(w["clientConfig"]["caBundle"]).startswith(b"-----BEGIN CERTIFICATE")
        assert "service" not in w["clientConfig"]
        # only what this cluster integrates: a pod or deployment webhook would be called and not served
        assert {g for r in w["rules"] for g in r["apiGroups"]} <= {"kueue.x-k8s.io", "batch"}


def test_the_clusters_virtual_ranges_stay_in_the_lab_range_and_off_the_stacks_networks():
    nets = ["198.18.0.0/20", "198.18.32.0/20", "198.19.0.0/16"]
    service, pods = control_plane.cluster_ranges(nets)
    lab = ipaddress.ip_network("198.18.0.0/15")
    for cidr in (service, pods):
        block = ipaddress.ip_network(cidr)
        assert block.subnet_of(lab)
        assert not any(block.overlaps(ipaddress.ip_network(n)) for n in nets)
    assert not ipaddress.ip_network(service).overlaps(ipaddress.ip_network(pods))
    assert control_plane.cluster_ranges(nets) == (service, pods)  # the same on every run


def test_certificates_are_kept_and_issued_again_for_a_new_address(tmp_path):
    ca, key, made = pki.ensure_ca(tmp_path, "test CA")
    assert made and oct((tmp_path / "ca.key").stat().st_mode & 0o777) == "0o600"
    leaf = pki.Leaf("apiserver", "kube-apiserver", server=True, ips=("198.18.0.254",), dns=("kubernetes",))
    assert pki.ensure_leaf(tmp_path, ca, key, leaf)
    assert not pki.ensure_leaf(tmp_path, ca, key, leaf)  # a second run keeps it
    cert = x509.load_pem_x509_certificate((tmp_path / "apiserver.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    moved = pki.Leaf("apiserver", "kube-apiserver", server=True, ips=("198.18.1.254",), dns=("kubernetes",))
    assert pki.ensure_leaf(tmp_path, ca, key, moved)
    san = x509.load_pem_x509_certificate((tmp_path / "apiserver.crt").read_bytes()).extensions \
        .get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["198.18.1.254"]
    # a CA made again (its key lost) re-issues what the old one signed
    (tmp_path / "ca.key").unlink()
    ca2, key2, made2 = pki.ensure_ca(tmp_path, "test CA")
    assert made2 and pki.ensure_leaf(tmp_path, ca2, key2, moved)


def test_a_new_identity_is_issued_again_and_an_old_certificate_is_due_for_renewal(tmp_path):
    import datetime

    ca, key, _ = pki.ensure_ca(tmp_path, "test CA")
    admin = pki.Leaf("kwok", "railyard:kwok", "system:masters", client=True)
    assert pki.ensure_leaf(tmp_path, ca, key, admin)
    assert not pki.ensure_leaf(tmp_path, ca, key, admin)
    # the same name with another group (less privilege): a new certificate, not the old one kept
    assert pki.ensure_leaf(tmp_path, ca, key, pki.Leaf("kwok", "railyard:kwok", None, client=True))
    assert pki.expiring(tmp_path) == []
    pki_validity = pki.VALIDITY
    try:
        pki.VALIDITY = datetime.timedelta(days=10)  # inside the renewal window from the start
        pki.ensure_leaf(tmp_path, ca, key, admin, renew=True)
    finally:
        pki.VALIDITY = pki_validity
    assert pki.expiring(tmp_path) == ["kwok.crt"]
