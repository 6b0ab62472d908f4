"""A checkpoint in which every resource of a stack already exists, made from previews of the stack
itself, so the engine section can time a preview with state without creating a lab machine.

The engine section's stateful figure imports it into the bench project's throwaway backend with
`pulumi stack import`. How it is made:

1. `pulumi preview --json` of the fresh stack gives each resource's URN, type, parent, provider,
   dependencies and inputs (`checkpoint(preview, base)`). Each resource's outputs are its inputs
   plus what its lab provider's create would return (`OUTPUTS`: a host key per node, the access
   key, the object store's endpoint and keys...), with made-up but plausible values. The default
   providers the steps name are added with the stack's config as their inputs, as the engine
   records them.
2. That first checkpoint cannot hold every input: some come from other resources' outputs
   (unknown in a fresh preview: the nodes' authorized key, the tuning run's hosts) and the preview
   JSON shows every secret as "[secret]" (the tuning and expiry providers' pickles, the tuning
   run's key and object-store identity). So the stack is previewed on it with the engine's gRPC
   log on (PULUMI_DEBUG_GRPC): the log holds each RegisterResource request, the inputs exactly as
   the program sends them, secrets in the clear (made-up ones: they come from the outputs of step
   1). `registered_inputs(log)` reads them, and `checkpoint(preview, base, registered)` puts them
   in place. An input made of an output that a changed resource leaves unknown in preview is
   known one round later, so this repeats until a preview plans no change: three previews for the
   lab stack (access key -> nodes' authorized key -> nodes' host keys in the tuning run's hosts).
3. The timed preview on the settled checkpoint must plan no change (`changes`); the bench asserts
   it.

Nothing here starts the engine; railyard.bench.bench_engine runs the commands. A preview never
creates, updates or deletes: it calls the dynamic providers' check and diff only, and the lab
providers' diffs compare inputs (railyard/drivers/lab/resources.py) without touching an object.
"""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

from railyard.review.preview import decoded, provider_class

# The engine's wire value for "not known during preview", as preview JSON prints it.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# A secret value in a checkpoint and on the wire: {SIG_KEY: SECRET_SIG, "plaintext" | "value": ...}.
SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
# How preview JSON shows a secret (the display blinds secrets even with --show-secrets).
BLINDED = "[secret]"
PROVIDER_KEY = "__provider"
STACK_TYPE = "pulumi:pulumi:Stack"
REGISTER_RESOURCE = "/pulumirpc.ResourceMonitor/RegisterResource"


def secret(value: Any) -> dict:
    """A secret in the form `pulumi stack import` takes and encrypts with the stack's own key."""
    return {SIG_KEY: SECRET_SIG, "plaintext": json.dumps(value)}


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG_KEY) == SECRET_SIG


def _digest(text: str, size: int = 32) -> bytes:
    return hashlib.shake_256(text.encode()).digest(size)


def host_key(urn: str) -> str:
    """A well-formed ed25519 public key, the same for the same URN (no key pair behind it)."""
    kind = b"ssh-ed25519"
    blob = len(kind).to_bytes(4, "big") + kind + (32).to_bytes(4, "big") + _digest(urn)
    return f"ssh-ed25519 {base64.b64encode(blob).decode()}"


def private_key(urn: str) -> str:
    """Shaped like an OpenSSH private key, holding nothing: no one logs in with it."""
    body = base64.b64encode(b"railyard bench checkpoint, not a key " + _digest(urn, 48)).decode()
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n"


def _rfc3339(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _expiry(_urn: str, inputs: dict) -> dict:
    created = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    ttl = datetime.timedelta(seconds=int(inputs.get("ttl_seconds") or 0))
    return {"created_at": _rfc3339(created), "expires_at": _rfc3339(created + ttl)}


def _object_store(urn: str, inputs: dict) -> dict:
    address = str(inputs.get("address", "192.0.2.1/24")).split("/")[0]
    return {"endpoint": f"http://{address}:8333", "dataset_prefix": "sample/",
            "access_key": "RY" + _digest(urn, 9).hex().upper(),
            "secret_key": base64.urlsafe_b64encode(_digest("secret " + urn, 30)).decode()}


# What each provider's create returns on top of its inputs, by the provider's class name (the
# classes in railyard/drivers/lab/resources.py, railyard/tuning/resource.py and
# railyard/lifecycle/resource.py). f(urn, inputs) -> outputs; secrets are marked by the
# resource's additionalSecretOutputs, as the engine marks them.
OUTPUTS: dict[str, Callable[[str, dict], dict]] = {
    "AccessKeyProvider": lambda urn, i: {"public_key": f"{host_key(urn)} {i.get('comment', '')}".strip(),
                                         "private_key": private_key(urn)},
    "FabricProvider": lambda urn, i: {"namespace": f"bench-{i.get('stack', '')}-fabric"},
    "SpineProvider": lambda urn, i: {},
    "NodeProvider": lambda urn, i: {"host_key": host_key(urn), **(
        {"cache_device": "/dev/loop0", "cache_note": ""} if (decoded(i.get("spec")) or {}).get("cache") else {})},
    "VmProvider": lambda urn, i: {"host_key": host_key(urn)},
    # A node's storage before issue 18 (its own resource), for checkpoints of an older commit's
    # program (the before figures of a change are taken that way).
    "NodeStorageProvider": lambda urn, i: {"cache_device": "/dev/loop0", "cache_note": ""},
    "ObjectStoreProvider": _object_store,
    "TuningProvider": lambda urn, i: {"last_run": "20000101T000000.000000Z", "changed": 0},
    # railyard.tuning.acceptance.run: a run in which every node passed.
    "AcceptanceProvider": lambda urn, i: {"passed": True, "findings": [], "drained": [], "cordoned": {},
                                          "rail_pairs": 0, "median_gbps": 0.0, "flagged": [], "seconds": 0.0,
                                          "report": None, "last_run": "20000101T000000.000000Z"},
    "ExpiryProvider": _expiry,
    # The baseline's no-op resource (railyard.bench.noop): its outputs are its inputs.
    "NoopProvider": lambda urn, i: {},
}


class CheckpointError(RuntimeError):
    """The previews do not give what a checkpoint needs; the message names the resource."""


def _name(urn: str) -> str:
    return urn.split("::")[-1]


def _resource_id(urn: str) -> str:
    return f"bench-{_name(urn)}"


def _split_ref(ref: str) -> tuple[str, str]:
    urn, _, rid = ref.rpartition("::")
    return urn, rid


def _has(value: Any, needle: str) -> bool:
    if isinstance(value, dict):
        return any(_has(v, needle) for v in value.values())
    if isinstance(value, list):
        return any(_has(v, needle) for v in value)
    return value == needle


def has_unknown(value: Any) -> bool:
    """Whether a value holds the engine's unknown anywhere."""
    return _has(value, UNKNOWN)


def from_wire(value: Any) -> Any:
    """A value from a gRPC request (protobuf JSON) in checkpoint form: secrets as plaintext."""
    if isinstance(value, dict):
        if value.get(SIG_KEY) == SECRET_SIG:
            return secret(unwrap(value.get("value")))
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    return value


def unwrap(value: Any) -> Any:
    """A wire value with its secret markers removed (the plaintext a provider sees)."""
    if isinstance(value, dict):
        if value.get(SIG_KEY) == SECRET_SIG:
            return unwrap(json.loads(value["plaintext"]) if "plaintext" in value else value.get("value"))
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def registered_inputs(log: Path) -> dict[str, dict]:
    """URN -> inputs of every RegisterResource request in a PULUMI_DEBUG_GRPC log, as the program
    sent them (secrets in the clear, in checkpoint form)."""
    out: dict[str, dict] = {}
    with open(log) as f:
        for line in f:
            if REGISTER_RESOURCE not in line:
                continue
            entry = json.loads(line)
            if entry.get("method") != REGISTER_RESOURCE or "response" not in entry:
                continue
            urn = entry["response"].get("urn")
            if urn:
                out[urn] = from_wire((entry.get("request") or {}).get("object") or {})
    return out


def _order(resources: list[dict]) -> list[dict]:
    """Resources with each after its parent, provider and dependencies (a checkpoint's rule),
    otherwise in the given order."""
    by_urn = {r["urn"]: r for r in resources}
    done: set[str] = set()
    out: list[dict] = []

    def needs(r: dict) -> Iterable[str]:
        yield from filter(None, [r.get("parent"), _split_ref(r["provider"])[0] if r.get("provider") else None])
        yield from r.get("dependencies") or ()
        for deps in (r.get("propertyDependencies") or {}).values():
            yield from deps

    def visit(r: dict, path: tuple[str, ...]) -> None:
        if r["urn"] in done:
            return
        if r["urn"] in path:
            raise CheckpointError(f"{r['urn']}: depends on itself through {' -> '.join(path)}")
        for urn in needs(r):
            if urn in by_urn:
                visit(by_urn[urn], (*path, r["urn"]))
        done.add(r["urn"])
        out.append(r)

    for r in resources:
        visit(r, ())
    return out


def checkpoint(preview: dict, base: dict, registered: dict[str, dict] | None = None) -> dict:
    """A version-3 deployment (what `pulumi stack import` reads) holding every resource the
    preview's steps plan, each as if it had been created.

    preview:    the `pulumi preview --json` result of the fresh stack (steps, config);
    base:       `pulumi stack export` of the same stack (its manifest and secrets provider);
    registered: URN -> inputs from registered_inputs() of the previous round; a resource it
                lacks has the preview's inputs. Either way an input not known yet (unknown,
                blinded) is left out.
    """
    registered = registered or {}
    steps = [s for s in preview.get("steps") or () if s.get("newState")]
    stack_steps = [s for s in steps if s["newState"]["type"] == STACK_TYPE]
    if len(stack_steps) != 1:
        raise CheckpointError(f"the preview plans {len(stack_steps)} stack resources, not one")
    resources: list[dict] = [{"urn": stack_steps[0]["urn"], "custom": False, "type": STACK_TYPE}]

    # Default providers: the steps name them with an unknown id; the engine records one each, its
    # inputs the stack's config.
    provider_ids: dict[str, str] = {}
    for s in steps:
        ref = s["newState"].get("provider")
        if ref and _split_ref(ref)[0] not in provider_ids:
            urn = _split_ref(ref)[0]
            provider_ids[urn] = str(uuid.uuid5(uuid.NAMESPACE_URL, urn))
            config = dict(preview.get("config") or {})
            resources.append({"urn": urn, "custom": True, "id": provider_ids[urn],
                              "type": urn.split("::")[-2], "inputs": config, "outputs": dict(config)})

    for s in steps:
        new = s["newState"]
        if new["type"] == STACK_TYPE:
            continue
        urn = new["urn"]
        r: dict[str, Any] = {"urn": urn, "custom": bool(new.get("custom")), "type": new["type"]}
        if new.get("parent"):
            r["parent"] = new["parent"]
        for key in ("protect", "dependencies", "propertyDependencies", "additionalSecretOutputs"):
            if new.get(key):
                r[key] = copy.deepcopy(new[key])
        if not r["custom"]:
            resources.append(r)
            continue
        if new.get("provider"):
            prov_urn, _ = _split_ref(new["provider"])
            r["provider"] = f"{prov_urn}::{provider_ids[prov_urn]}"
        r["id"] = _resource_id(urn)
        # What a preview could not show (an input made of another resource's unknown output, a
        # blinded secret) is left out: the resource then differs, and the next round fills it in.
        known = registered.get(urn, new.get("inputs") or {})
        inputs = {k: v for k, v in known.items() if v is not None and not _has(v, UNKNOWN) and not _has(v, BLINDED)}
        r["inputs"] = inputs
        r["outputs"] = outputs_for(urn, inputs, r.get("additionalSecretOutputs") or (), strict=urn in registered)
        resources.append(r)

    deployment = {k: copy.deepcopy(v) for k, v in (base.get("deployment") or {}).items()
                  if k in ("manifest", "secrets_providers", "metadata")}
    deployment["resources"] = _order(resources)
    return {"version": 3, "deployment": deployment}


def outputs_for(urn: str, inputs: dict, secret_outputs: Iterable[str] = (), strict: bool = True) -> dict:
    """A created resource's outputs: its inputs (secret ones stay secret) and what its provider's
    create adds. strict: a provider OUTPUTS does not know is an error (a figure measured on
    missing outputs would skip what the program does with them)."""
    cls = provider_class(unwrap(inputs.get(PROVIDER_KEY)))
    if cls is None and PROVIDER_KEY in inputs and strict:
        raise CheckpointError(f"{urn}: its dynamic provider cannot be read from __provider")
    add = OUTPUTS.get(cls) if cls else None
    if add is None and cls is not None and strict:
        raise CheckpointError(f"{urn}: stack_state.OUTPUTS knows no outputs of {cls}; add what its create returns")
    extra = add(urn, unwrap(inputs)) if add else {}
    secrets = set(secret_outputs)
    return {**inputs, **{k: secret(v) if k in secrets else v for k, v in extra.items()}}


def payloads(export: dict) -> list[dict]:
    """Each resource's inputs in a `pulumi stack export` (providers and the stack left out; a
    component's are none), secrets as strings of their ciphertext's length and the provider
    pickles dropped: the properties a baseline resource holds to weigh in state what a resource of
    the stack does, one per resource, as the fresh preview's baseline has one per resource."""
    def plain(v: Any) -> Any:
        if is_secret(v):
            return "s" * len(json.dumps(v))
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    out = []
    for r in (export.get("deployment") or {}).get("resources") or ():
        if r["type"] == STACK_TYPE or r["type"].startswith("pulumi:providers:"):
            continue
        out.append({k: plain(v) for k, v in (r.get("inputs") or {}).items() if not k.startswith("__")})
    return out


def plan_counts(result: dict) -> dict[str, int]:
    """A preview's steps by operation ("same", "create", "update", ...), from its change summary:
    with state, preview JSON lists only the stack and the steps that change something."""
    return {op: int(n) for op, n in (result.get("changeSummary") or {}).items()}


def changes(result: dict) -> list[str]:
    """'op urn' of every step of a preview that is not 'same'."""
    listed = [f"{s.get('op')} {s.get('urn')}" for s in result.get("steps") or () if s.get("op") != "same"]
    counted = sum(n for op, n in plan_counts(result).items() if op != "same")
    return listed + [f"{counted - len(listed)} more in the change summary"] * (counted > len(listed))
