"""The lab's Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, the Kueue controller and kwok, in a namespace of the stack's own, ``ry-T-k8s``, on
its management network.

A veth ``k8s`` on the fabric's mgmt bridge holds the API server's address (the plan's
management service address `kubernetes`), so the host (Pulumi and its Kubernetes provider) and
every node reach it over the management network, and nothing outside the lab can. etcd listens on
the namespace's loopback only. TLS is on everywhere a client connects: a CA the stack creates
(pki.py) issues the API server's serving certificate, each component's client certificate and
Kueue's webhook certificate. Kueue's webhooks are registered by URL at the API server's address,
where Kueue serves them (there is no kube-proxy), with the CA as their bundle.

kwok plays the kubelet for every Node that carries `kwok.x-k8s.io/node: fake` (the Kubernetes
layer creates them, components/kubernetes.py): it keeps them Ready with leases and takes their
pods to Running, with the stages of the pinned kwok module (node-initialize, heartbeat with
lease, pod ready and delete: pods run until deleted).

Everything lives in ``<lab dir>/kubernetes`` (0700; keys 0600); `delete_control_plane` stops
every process, removes the namespace (its veth with it) and that directory. A component whose
command line or files changed is restarted; one that runs as configured is left alone.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from railyard import paths
from railyard.drivers.lab import fabric, names, net, node, proc
from railyard.engine import control_plane as binaries
from railyard.engine.toolchain import ToolchainError
from railyard.model.kubernetes import sriov
from railyard.drivers.lab.control_plane import pki
from railyard.drivers.lab.control_plane.api import ApiError, Client, serving
from railyard.drivers.lab.errors import LabError, require_root
from railyard.drivers.lab.fabric import LAB_NETNS_SYSCTLS

API_PORT = 6443
WEBHOOK_PORT = 9443
KUEUE_HEALTH_PORT = 8081
START_TIMEOUT_S = 90.0
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "kwok")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KUEUE_NAMESPACE = "kueue-system"
# Kueue integrates batch Jobs only; webhooks of other frameworks would be called and not served.
KUEUE_WEBHOOK_GROUPS = {"kueue.x-k8s.io", "batch"}
# Where Kueue looks for its metrics certificate whatever its configuration says; a private
# overlay of /etc, in Kueue's own mount namespace, puts one there without touching the host's /etc.
KUEUE_METRICS_CERTS = "kueue/metrics/certs"
SERVICE_DOMAIN_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                        "kubernetes.default.svc.cluster.local")
# No pod-complete stage: a training pod runs until it is deleted, as it would on a real node.
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml")

# Client identities. The controller manager and scheduler have the roles Kubernetes bootstraps for
# them; kwok and Kueue act for every node and every queue, so in the lab they are cluster admins.
IDENTITIES = {
    "admin": ("railyard-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kwok": ("railyard:kwok", "system:masters"),
    "kueue": ("railyard:kueue", "system:masters"),
}


def control_plane_dir(stack: str, root: Path | None = None) -> Path:
    return paths.lab_dir(stack, root) / "kubernetes"


# --- addresses --------------------------------------------------------------------------------

def cluster_ranges(networks: list[str], lab_range: str = "198.18.0.0/15") -> tuple[str, str]:
    """(service CIDR /24, pod CIDR /20): the first blocks of the lab range that overlap none of
    the stack's networks. Neither is ever routed (no kube-proxy; kwok's pods have no interfaces),
    but they stay inside the lab range all the same."""
    taken = [ipaddress.ip_network(n) for n in networks]
    rng = ipaddress.ip_network(lab_range)
    out: list[str] = []
    for prefix in (24, 20):
        blocks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = list(rng.subnets(new_prefix=prefix))
        block = next((b for b in reversed(blocks)
                      if not any(b.overlaps(t) for t in taken) and not any(b.overlaps(ipaddress.ip_network(o))
                                                                               for o in out)), None)
        if block is None:
            raise LabError("control plane", f"no free /{prefix} in {lab_range} for the cluster's virtual addresses")
        out.append(str(block))
    return out[0], out[1]


# --- files ------------------------------------------------------------------------------------

def _kubeconfig(server: str, ca: bytes, cert: bytes, key: bytes, user: str) -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "railyard",
        "clusters": [{"name": "railyard", "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": "railyard", "context": {"cluster": "railyard", "user": user}}],
    }, sort_keys=False)


def _write_pki(d: Path, stack: str, ip: str, service_ip: str) -> bool:
    pk = d / "pki"
    pk.mkdir(mode=0o700, exist_ok=True)
    ca, ca_key, made = pki.ensure_ca(pk, f"railyard {stack} cluster CA")
    changed = made
    leaves = [pki.Leaf("apiserver", "kube-apiserver", server=True, ips=(ip, service_ip),
                       dns=SERVICE_DOMAIN_NAMES),
              pki.Leaf("kueue-webhook", "kueue-webhook", server=True, ips=(ip,))]
    leaves += [pki.Leaf(name, cn, org, client=True) for name, (cn, org) in IDENTITIES.items()]
    for leaf in leaves:
        changed |= pki.ensure_leaf(pk, ca, ca_key, leaf, renew=made)
    changed |= pki.ensure_signing_key(pk, "service-account")
    server = f"https://{ip}:{API_PORT}"
    cab = (pk / "ca.crt").read_bytes()
    for name in IDENTITIES:
        text = _kubeconfig(server, cab, (pk / f"{name}.crt").read_bytes(), (pk / f"{name}.key").read_bytes(), name)
        changed |= node._write_if_changed(d / f"{name}.kubeconfig", text, 0o600)
    # Kueue's certificate directories: the webhook's (its configured certDir) and, under the /etc
    # overlay's upper layer, the metrics one it insists on.
    for sub in ("kueue-certs", f"kueue-etc/upper/{KUEUE_METRICS_CERTS}"):
        target = d / sub
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        for src, dest in (("kueue-webhook.crt", "tls.crt"), ("kueue-webhook.key", "tls.key")):
            changed |= node._write_if_changed(target / dest, (pk / src).read_text(), 0o600)
    (d / "kueue-etc" / "work").mkdir(parents=True, exist_ok=True, mode=0o700)
    return changed


def _kwok_stages() -> str:
    base = binaries.kwok_module() / "kustomize" / "stage"
    return "".join("---\n" + (base / rel).read_text() for rel in KWOK_STAGES)


def _kueue_config(ip: str, d: Path) -> str:
    return yaml.safe_dump({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"{ip}:{KUEUE_HEALTH_PORT}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": WEBHOOK_PORT, "host": ip, "certDir": str(d / "kueue-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        # A Job without a queue label is left alone.
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
    }, sort_keys=False)


def _argv(comp: str, d: Path, ip: str, service_cidr: str, pod_cidr: str, bindir: Path) -> list[str]:
    pk = d / "pki"
    exe = str(bindir / comp)
    if comp == "etcd":
        loop = "http://127.0.0.1"
        return [exe, "--name", "railyard", "--data-dir", str(d / "etcd"),
                "--listen-client-urls", f"{loop}:2379", "--advertise-client-urls", f"{loop}:2379",
                "--listen-peer-urls", f"{loop}:2380", "--initial-advertise-peer-urls", f"{loop}:2380",
                "--initial-cluster", f"railyard={loop}:2380", "--listen-metrics-urls", f"{loop}:2381",
                # A lab cluster's data is rebuilt by `up`; fsync would make every write wait on disk.
                "--unsafe-no-fsync", "--log-level", "warn"]
    if comp == "kube-apiserver":
        return [exe, "--etcd-servers=http://127.0.0.1:2379", f"--bind-address={ip}", f"--advertise-address={ip}",
                f"--secure-port={API_PORT}", f"--tls-cert-file={pk / 'apiserver.crt'}",
                f"--tls-private-key-file={pk / 'apiserver.key'}", f"--client-ca-file={pk / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pk / 'service-account.pub'}",
                f"--service-account-signing-key-file={pk / 'service-account.key'}",
                f"--service-cluster-ip-range={service_cidr}", "--authorization-mode=Node,RBAC",
                # Every client presents a certificate from the stack's CA; nobody is anonymous.
                "--anonymous-auth=false",
                "--profiling=false"]
    if comp == "kube-controller-manager":
        kc = str(d / "kube-controller-manager.kubeconfig")
        return [exe, f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
                f"--service-account-private-key-file={pk / 'service-account.key'}", f"--root-ca-file={pk / 'ca.crt'}",
                "--use-service-account-credentials=true", "--profiling=false"]
    if comp == "kube-scheduler":
        kc = str(d / "kube-scheduler.kubeconfig")
        return [exe, f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false", "--profiling=false"]
    if comp == "kwok":
        return [exe, f"--kubeconfig={d / 'kwok.kubeconfig'}", f"--config={d / 'kwok.yaml'}",
                "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--node-ip={ip}", f"--cidr={pod_cidr}"]
    if comp == "kueue":
        return [exe, f"--config={d / 'kueue.yaml'}", f"--kubeconfig={d / 'kueue.kubeconfig'}",
                # Its visibility API wants certificates at a fixed /visibility path, and nothing
                # here asks for pending workloads through it.
                "--feature-gates=VisibilityOnDemand=false"]
    raise LabError("control plane", f"no component {comp!r}")


def _files_of(comp: str) -> tuple[str, ...]:
    """What a component reads at start: a change to any restarts it."""
    return {
        "kube-apiserver": ("pki/apiserver.crt", "pki/ca.crt", "pki/service-account.pub"),
        "kube-controller-manager": ("kube-controller-manager.kubeconfig", "pki/service-account.key"),
        "kube-scheduler": ("kube-scheduler.kubeconfig",),
        "kwok": ("kwok.kubeconfig", "kwok.yaml"),
        "kueue": ("kueue.kubeconfig", "kueue.yaml", "kueue-certs/tls.crt"),
    }.get(comp, ())


def _digest(d: Path, comp: str, argv: list[str]) -> str:
    # The binary the link points at too: a new build or a user's own restarts the component.
    h = hashlib.sha256(json.dumps([os.path.realpath(argv[0]), *argv]).encode())
    for rel in _files_of(comp):
        h.update(rel.encode() + b"\0" + (d / rel).read_bytes())
    return h.hexdigest()


# --- processes --------------------------------------------------------------------------------

def _pid(stack: str, comp: str, root: Path | None = None) -> int | None:
    """The component's process, if it runs in the control plane's current netns."""
    return proc.service_pid(control_plane_dir(stack, root) / f"{comp}.pid",
                            net.netns_inode(names.control_plane_ns(stack)), comp)


def _processes(stack: str) -> list[int]:
    return proc.service_processes(net.netns_inode(names.control_plane_ns(stack)), names.ENV_MARKER,
                                  names.control_plane_env_marker(stack))


def _start(stack: str, d: Path, comp: str, argv: list[str], root: Path | None) -> None:
    ns = names.control_plane_ns(stack)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(d), "LANG": "C.UTF-8",
           names.ENV_MARKER: names.control_plane_env_marker(stack)}
    (d / f"{comp}.pid").unlink(missing_ok=True)
    run = 'echo $$ > "$PIDFILE" && exec "$@" >>"$LOG" 2>&1'
    env.update(PIDFILE=str(d / f"{comp}.pid"), LOG=str(d / f"{comp}.log"))
    prefix = ["setsid", "--fork", "nsenter", f"--net={net.netns_path(ns)}", "--"]
    if comp == "kueue":
        # Its own mount namespace, /etc overlaid there with the metrics certificate directory.
        env.update(UPPER=str(d / "kueue-etc" / "upper"), WORK=str(d / "kueue-etc" / "work"))
        run = 'mount -t overlay railyard-kueue-etc -o "lowerdir=/etc,upperdir=$UPPER,workdir=$WORK" /etc && ' + run
        prefix += ["unshare", "--mount", "--propagation", "private", "--"]
    net.run([*prefix, "sh", "-c", run, comp, *argv], obj=f"control plane {ns} {comp}", env=env)
    deadline = time.monotonic() + 10
    while _pid(stack, comp, root) is None:
        if time.monotonic() > deadline:
            raise LabError(f"control plane {ns}", f"{comp} did not start: {log_tail(d, comp)}")
        time.sleep(0.02)


def log_tail(d: Path, comp: str, lines: int = 12) -> str:
    try:
        return "\n".join((d / f"{comp}.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait(what: str, ready, timeout: float, d: Path, comp: str, stack: str, root: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if _pid(stack, comp, root) is None:
            raise LabError(f"control plane {names.control_plane_ns(stack)}", f"{comp} exited: {log_tail(d, comp)}")
        if time.monotonic() > deadline:
            raise LabError(f"control plane {names.control_plane_ns(stack)}",
                           f"{what} not ready within {timeout:g}s: {log_tail(d, comp)}")
        time.sleep(0.1)


# --- what the cluster has installed -----------------------------------------------------------

def _crds() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for files in binaries.crd_files().values():
        for f in files:
            out.extend(doc for doc in yaml.safe_load_all(f.read_text()) if doc)
    return out


def kueue_webhooks(ip: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations from its pinned module, by URL at `ip` instead of by
    Service, for the frameworks this cluster integrates."""
    docs = yaml.safe_load_all((binaries.kueue_module() / "config/components/webhook/manifests.yaml").read_text())
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for doc in docs:
        if not doc:
            continue
        hooks = []
        for hook in doc.get("webhooks", []):
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if not groups or not groups <= KUEUE_WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hooks.append({**hook, "clientConfig": {"url": f"https://{ip}:{WEBHOOK_PORT}{path}", "caBundle": bundle}})
        # kustomize's namePrefix in Kueue's own install
        out.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                    "metadata": {"name": f"kueue-{doc['metadata']['name']}"}, "webhooks": hooks})
    return out


# --- the control plane ------------------------------------------------------------------------

def create_control_plane(stack: str, *, address: str, service_cidr: str, pod_cidr: str,
                         root: Path | None = None) -> dict:
    """Ensure the stack's control plane runs at `address` (the API server's, with prefix, on the
    management network) with Kueue and kwok, its CRDs and Kueue's webhooks installed. The fabric
    (with its mgmt bridge) must exist, and the binaries (railyard.engine.control_plane.ensure).
    Returns read_control_plane's result."""
    require_root()
    ns, fab = names.control_plane_ns(stack), names.fabric_ns(stack)
    what = f"control plane {ns}"
    iface = net.lab_interface(address, what)
    ip = str(iface.ip)
    for cidr, name in ((service_cidr, "service CIDR"), (pod_cidr, "pod CIDR")):
        net.lab_network(cidr, f"{what} {name}")
    bindir = paths.bin_dir(root)
    try:
        for comp in ORDER:
            binaries.binary(comp, root)
    except ToolchainError as exc:
        raise LabError(what, str(exc)) from exc
    if not net.netns_exists(fab):
        raise LabError(what, f"the fabric namespace {fab} does not exist; create the fabric first")
    if names.MGMT_BRIDGE not in net.links(fab, with_addresses=False):
        raise LabError(what, f"the fabric {fab} has no {names.MGMT_BRIDGE} bridge")

    d = control_plane_dir(stack, root)
    node.check_dir_location(d)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    service_ip = str(next(ipaddress.ip_network(service_cidr).hosts()))
    _write_pki(d, stack, ip, service_ip)
    try:
        stages, crds, hooks = _kwok_stages(), _crds(), kueue_webhooks(ip, (d / "pki" / "ca.crt").read_bytes())
    except ToolchainError as exc:  # the pinned modules' files, from the Go module cache
        raise LabError(what, str(exc)) from exc
    node._write_if_changed(d / "kwok.yaml", stages, 0o600)
    node._write_if_changed(d / "kueue.yaml", _kueue_config(ip, d), 0o600)
    node._write_if_changed(d / "config.json", json.dumps(
        {"address": str(iface), "service_cidr": service_cidr, "pod_cidr": pod_cidr}, indent=1, sort_keys=True) + "\n",
        0o600)

    net.claim_netns(ns, names.owner(stack, root))
    net.sysctls(ns, LAB_NETNS_SYSCTLS)
    fabric.attach_service(stack, ns, names.CONTROL_PLANE_PORT, names.MGMT_BRIDGE, str(iface))
    client = Client(ip, API_PORT, d / "pki")

    for comp in ORDER:
        argv = _argv(comp, d, ip, service_cidr, pod_cidr, bindir)
        digest = _digest(d, comp, argv)
        pid = _pid(stack, comp, root)
        stamp = d / f"{comp}.digest"
        if pid is not None and (stamp.read_text() if stamp.exists() else "") != digest:
            proc.kill_all([pid], what=f"{what} {comp}")  # its flags or files changed: start over
            pid = None
        if pid is None:
            _start(stack, d, comp, argv, root)
            node._write_if_changed(stamp, digest, 0o600)
        if comp == "kube-apiserver":
            _wait("the API server", client.ready, START_TIMEOUT_S, d, comp, stack, root)
            _install(client, ip, crds)
        elif comp == "kueue":
            _wait("Kueue", lambda: _kueue_ready(ip), START_TIMEOUT_S, d, comp, stack, root)
            for hook in hooks:
                client.apply(hook)
    state = read_control_plane(stack, root)
    if state is None or not all(state["running"].values()):
        raise LabError(what, f"not every component runs: {state and state['running']}")
    return state


def _kueue_ready(ip: str) -> bool:
    try:
        conn = http.client.HTTPConnection(ip, KUEUE_HEALTH_PORT, timeout=2)
        conn.request("GET", "/readyz")
        ok = conn.getresponse().status == 200
        conn.close()
    except OSError:
        return False
    return ok and serving(ip, WEBHOOK_PORT)


def _install(client: Client, ip: str, crds: list[dict[str, Any]]) -> None:
    """CRDs (Kueue's, the SR-IOV operator's, NetworkAttachmentDefinition) and their namespaces:
    what a cluster has before Railyard's layer or Kueue itself asks for them."""
    try:
        for crd in crds:
            client.apply(crd)
        # The namespaces Kueue and the SR-IOV operator are installed in: the layer's policies and
        # networks live in the operator's, as on a cluster that runs it.
        for ns in (KUEUE_NAMESPACE, sriov.OPERATOR_NAMESPACE):
            client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        client.wait_established([c["metadata"]["name"] for c in crds], 30)
    except (ApiError, OSError) as exc:
        raise LabError(f"control plane at {ip}", f"installing CRDs: {exc}") from exc


def read_control_plane(stack: str, root: Path | None = None) -> dict | None:
    """The control plane as it is now, or None when its netns is gone:

    {"id", "stack", "netns", "endpoint", "address", "running": {component: pid | None},
     "ca_certificate", "data_dir"}"""
    ns = names.control_plane_ns(stack)
    if not net.netns_exists(ns):
        return None
    d = control_plane_dir(stack, root)
    addrs = net.addresses(net.links(ns).get(names.CONTROL_PLANE_PORT) or {})
    address = addrs[0] if addrs else None
    try:
        ca = (d / "pki" / "ca.crt").read_text()
    except OSError:
        ca = None
    return {
        "id": ns, "stack": stack, "netns": ns, "address": address,
        "endpoint": f"https://{address.split('/')[0]}:{API_PORT}" if address else None,
        "running": {comp: _pid(stack, comp, root) for comp in ORDER},
        "ca_certificate": ca, "data_dir": str(d),
    }


def needs_renewal(stack: str, root: Path | None = None) -> list[str]:
    """Certificates close to expiry, which the next create issues again (and restarts what reads them)."""
    d = control_plane_dir(stack, root) / "pki"
    return pki.expiring(d) if d.is_dir() else []


def admin_kubeconfig(stack: str, root: Path | None = None) -> str:
    """The admin's kubeconfig (a credential: the caller keeps it secret)."""
    try:
        return (control_plane_dir(stack, root) / "admin.kubeconfig").read_text()
    except OSError as exc:
        raise LabError(f"control plane {names.control_plane_ns(stack)}", f"no admin kubeconfig: {exc}") from exc


def delete_control_plane(stack: str, root: Path | None = None) -> dict:
    """Stop every component, remove the namespace (its veth with it) and the directory, data included."""
    require_root()
    ns = names.control_plane_ns(stack)
    d = control_plane_dir(stack, root)
    existed = net.netns_exists(ns) or d.exists()
    proc.kill_all(_processes(stack), what=f"control plane {ns}")
    net.netns_delete(ns)
    fabric.detach_service(stack, names.CONTROL_PLANE_PORT)
    proc.remove_tree(d)
    return {"id": ns, "deleted": existed}
