#!/usr/bin/python
"""Stage an object-store prefix into a local directory: parallel, resumable, checksum-verified."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dataset_cache_stage
short_description: Copy an S3 prefix into the local cache, transferring only what is missing or changed
description:
  - Lists the objects under a prefix and downloads those the cache does not hold yet, several at a
    time. Each object is fetched into C(NAME.part) and resumed from where it stopped (an HTTP range
    request), verified against the object's checksum (its MD5 ETag, or the multipart ETag rebuilt
    from part MD5s) and only then renamed into place.
  - A manifest (C(.railyard-cache.json) in the destination) records the ETag and size of every
    staged object, so a second run lists the bucket, finds nothing new and transfers nothing.
  - In check mode nothing is written; the objects that would be transferred are returned.
requirements: [boto3]
options:
  bucket: {description: Bucket name., type: str, required: true}
  prefix: {description: Key prefix to stage (empty for the whole bucket)., type: str, default: ""}
  dest: {description: Local directory the prefix lands in., type: path, required: true}
  endpoint_url: {description: S3 endpoint URL (empty for AWS)., type: str, default: ""}
  region: {description: Region name., type: str, default: us-east-1}
  access_key: {description: Access key (default from the environment)., type: str, no_log: true}
  secret_key: {description: Secret key (default from the environment)., type: str, no_log: true}
  workers: {description: Objects downloaded at once., type: int, default: 8}
  verify: {description: "C(quick) trusts the manifest for staged files of the right size; C(full) re-hashes them.", type: str, choices: [quick, full], default: quick}
  owner: {description: Owner of staged files and of the destination directory., type: str}
  group: {description: Group of staged files and of the destination directory., type: str}
  mode: {description: "Mode of the directories from I(root) down to I(dest), created when missing.", type: raw}
  root: {description: "The cache's root (its mount point), at or above I(dest); default I(dest).", type: path}
author: Railyard
"""

EXAMPLES = r"""
- name: Stage the dataset
  dataset_cache_stage:
    bucket: datasets
    prefix: imagenet/
    dest: /mnt/cache/datasets
    endpoint_url: http://198.18.0.2:8333
"""

RETURN = r"""
transferred:
  description: Keys downloaded (in check mode, those that would be).
  returned: always
  type: list
  elements: str
bytes:
  description: Bytes downloaded (in check mode, that would be).
  returned: always
  type: int
objects:
  description: Objects under the prefix.
  returned: always
  type: int
"""

import concurrent.futures
import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import boto3
    from botocore.config import Config
except ImportError:
    boto3 = None

MANIFEST = ".railyard-cache.json"
CHUNK = 1 << 20


def _etag_matches(path, etag, size):
    """Whether the file's content gives the ETag S3 computed (plain MD5, or MD5 of part MD5s)."""
    etag = etag.strip('"')
    if "-" not in etag:
        h = hashlib.md5()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                h.update(block)
        return h.hexdigest() == etag
    parts = int(etag.split("-")[1])
    # The part size is not stored: try the common client defaults and the even split.
    sizes = {8 << 20, 16 << 20, 5 << 20, 64 << 20}
    if parts:
        sizes.add(-(-size // parts + (1 << 20) - 1) // (1 << 20) * (1 << 20))
    for part in sorted(sizes):
        if -(-size // part) != parts:
            continue
        digests = []
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(part), b""):
                digests.append(hashlib.md5(block).digest())
        if f"{hashlib.md5(b''.join(digests)).hexdigest()}-{parts}" == etag:
            return True
    return False


def _local(dest, prefix, key):
    rel = key[len(prefix):].lstrip("/") if prefix and key.startswith(prefix) else key
    path = os.path.normpath(os.path.join(dest, rel))
    if not path.startswith(os.path.normpath(dest) + os.sep):
        raise ValueError(f"object key {key!r} would land outside {dest}")
    return path


def _download(client, bucket, obj, path):
    part = path + ".part"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have > obj["Size"]:
        os.unlink(part)
        have = 0
    if have < obj["Size"]:
        extra = {"Range": f"bytes={have}-"} if have else {}
        body = client.get_object(Bucket=bucket, Key=obj["Key"], IfMatch=obj["ETag"], **extra)["Body"]
        with open(part, "ab") as fh:
            for block in iter(lambda: body.read(CHUNK), b""):
                fh.write(block)
    elif not os.path.exists(part):
        open(part, "wb").close()
    if not _etag_matches(part, obj["ETag"], obj["Size"]):
        os.unlink(part)  # a corrupt partial must not be resumed
        raise ValueError(f"{obj['Key']}: checksum does not match ETag {obj['ETag']}")
    os.replace(part, path)
    return obj["Size"] - have


def _own_dirs(module, root, dest):
    """Create `root` and the directories down to `dest` where missing, with the mode and owner
    asked for; whether anything was (or, in check mode, would be) changed."""
    rel = os.path.relpath(dest, root)
    if rel.startswith(".."):
        module.fail_json(msg=f"dataset_cache_stage: dest {dest} is not under root {root}")
    dirs = [root] + ([] if rel == "." else
                     [os.path.join(root, *rel.split(os.sep)[:i + 1]) for i in range(len(rel.split(os.sep)))])
    p, changed = module.params, False
    for d in dirs:
        if not os.path.isdir(d):
            changed = True
            if module.check_mode:
                continue
            os.mkdir(d)
        changed = module.set_fs_attributes_if_different(
            dict(path=d, mode=p["mode"], owner=p["owner"], group=p["group"], secontext=None, attributes=None),
            changed)
    return changed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            bucket=dict(type="str", required=True),
            prefix=dict(type="str", default=""),
            dest=dict(type="path", required=True),
            endpoint_url=dict(type="str", default=""),
            region=dict(type="str", default="us-east-1"),
            access_key=dict(type="str", no_log=True),
            secret_key=dict(type="str", no_log=True),
            workers=dict(type="int", default=8),
            verify=dict(type="str", choices=["quick", "full"], default="quick"),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="raw"),
            root=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if boto3 is None:
        module.fail_json(msg=missing_required_lib("boto3"))
    p = module.params
    client = boto3.client(
        "s3", endpoint_url=p["endpoint_url"] or None, region_name=p["region"],
        aws_access_key_id=p["access_key"], aws_secret_access_key=p["secret_key"],
        config=Config(retries={"max_attempts": 5, "mode": "standard"}, s3={"addressing_style": "path"},
                      max_pool_connections=max(10, p["workers"])),
    )
    objects = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=p["bucket"], Prefix=p["prefix"]):
            objects += [o for o in page.get("Contents", []) if not o["Key"].endswith("/")]
    except Exception as exc:  # botocore raises many types; one message for the operator
        module.fail_json(msg=f"dataset_cache_stage: cannot list s3://{p['bucket']}/{p['prefix']}: {exc}")
    dest = p["dest"]
    manifest_path = os.path.join(dest, MANIFEST)
    try:
        with open(manifest_path) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError):
        manifest = {}
    todo = []
    for obj in sorted(objects, key=lambda o: o["Key"]):
        path = _local(dest, p["prefix"], obj["Key"])
        rec = manifest.get(obj["Key"])
        present = os.path.isfile(path) and os.path.getsize(path) == obj["Size"]
        if present and rec and rec.get("etag") == obj["ETag"] and rec.get("size") == obj["Size"]:
            if p["verify"] == "quick" or _etag_matches(path, obj["ETag"], obj["Size"]):
                continue
        todo.append((obj, path))
    result = dict(objects=len(objects), transferred=[o["Key"] for o, _ in todo],
                  bytes=sum(o["Size"] for o, _ in todo))
    # The directories are the role's to own: one module run instead of a file task beside this one.
    dir_changed = _own_dirs(module, p["root"] or dest, dest)
    if module.check_mode or not todo:
        module.exit_json(changed=dir_changed or bool(todo), **result)
    moved, errors = 0, []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, p["workers"])) as pool:
        futures = {pool.submit(_download, client, p["bucket"], o, path): (o, path) for o, path in todo}
        for fut in concurrent.futures.as_completed(futures):
            obj, path = futures[fut]
            try:
                moved += fut.result()
            except Exception as exc:  # report every failed object, keep the others
                errors.append(f"{obj['Key']}: {exc}")
                continue
            manifest[obj["Key"]] = {"etag": obj["ETag"], "size": obj["Size"]}
            if p["owner"] or p["group"]:
                module.set_owner_if_different(path, p["owner"], False)
                module.set_group_if_different(path, p["group"], False)
    tmp = manifest_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(dict(sorted(manifest.items())), fh, indent=1, sort_keys=True)
    os.replace(tmp, manifest_path)
    result["bytes"] = moved
    if errors:
        module.fail_json(msg="dataset_cache_stage: some objects failed (rerun to resume): " + "; ".join(errors),
                         changed=True, **result)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
