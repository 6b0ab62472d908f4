#!/usr/bin/env bash
# make fresh-check: a rehearsal of a fresh machine. Clones the committed HEAD into a temporary
# directory, points every cache Railyard's set-up uses (its build cache, Go's, pip's, XDG's) at
# empty temporary directories, and runs `make up`, `make preview`, `make down` and `make test` there,
# timing each.
#
# It brings up a stack of its own (FRESH_STACK, default `fresh`) on management and storage
# networks no route of this machine uses, refuses to start while lab objects of that stack exist,
# and never touches another checkout's objects or the developer's own `lab`. What it cannot reset:
# Debian packages already installed (scripts/host-deps.sh installs only what is missing) and the Go
# toolchain itself. It takes as long as a cold build plus the test suite.
#
# The result is printed and written to .railyard/fresh-check/last.json in this checkout.
set -euo pipefail

src=$(git rev-parse --show-toplevel)
cd "$src"
stack=${FRESH_STACK:-fresh}
if ! [[ $stack =~ ^[a-z0-9]{1,6}$ ]]; then
  echo "fresh-check: FRESH_STACK must be 1-6 of a-z 0-9 (a readable lab tag), got '$stack'" >&2
  exit 2
fi
prefix="ry-$stack-"
commit=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "fresh-check: note: uncommitted changes are not rehearsed; the clone is of HEAD ${commit:0:12}" >&2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-check: needs root (make up brings up a lab stack)" >&2
  exit 2
fi

# Lab objects of the stack on this machine: namespaces, root-namespace links, marked processes,
# and (once the clone exists) mounts and loop devices under it. Output is captured whole before
# it is searched, so a full pipe can never read as "nothing".
lab_objects() {
  local netns links procs
  netns=$(ip netns list 2>/dev/null || true)
  links=$(ip -o link show 2>/dev/null || true)
  procs=$(grep -ls -z "^RAILYARD_LAB=$stack:" /proc/[0-9]*/environ 2>/dev/null || true)
  awk '{print $1}' <<<"$netns" | grep "^$prefix" || true
  awk -F': ' '{print $2}' <<<"$links" | cut -d@ -f1 | grep "^$prefix" || true
  [ -z "$procs" ] || echo "$procs"
  if [ -n "${base:-}" ]; then
    grep -F " $base/" /proc/self/mountinfo | awk '{print $5}' || true
    losetup -l -n -O NAME,BACK-FILE 2>/dev/null | grep -F "$base/" || true
  fi
}

# Refuse before anything exists: objects of this stack, whoever made them, are not ours to reuse.
leftover=$(lab_objects)
if [ -n "$leftover" ]; then
  echo "fresh-check: lab objects of stack '$stack' already exist on this machine; nothing was started:" >&2
  echo "$leftover" | sed 's/^/  /' >&2
  echo "Remove them from the checkout that made them (railyard lab gc --all), or set FRESH_STACK." >&2
  exit 1
fi

# Two /24s of the bench's pool that no route of this machine overlaps.
read -r mgmt storage < <(python3 - <<'EOF'
import ipaddress, json, subprocess
routes = json.loads(subprocess.run(["ip", "-j", "route", "show", "table", "all"], capture_output=True,
                                   text=True, check=True).stdout or "[]")
used = []
for r in routes:
    dst = r.get("dst", "")
    if dst and dst != "default" and ":" not in dst:
        try:
            used.append(ipaddress.ip_network(dst, strict=False))
        except ValueError:
            pass
free = [n for n in ipaddress.ip_network("198.18.64.0/18").subnets(new_prefix=24)
        if not any(n.overlaps(u) for u in used)]
print(free[-1], free[-2])
EOF
)

# Not under /var, /run, /etc, /boot or /mnt: lab nodes mount their own over those.
tmp_root=$(readlink -f "${FRESH_TMPDIR:-/tmp}")
case "$tmp_root/" in
  /var/*|/run/*|/etc/*|/boot/*|/mnt/*|/proc/*|/sys/*|/dev/*)
    echo "fresh-check: FRESH_TMPDIR=$tmp_root lies where lab nodes mount their own directories; use another" >&2
    exit 2;;
esac
base=$(mktemp -d "$tmp_root/railyard-fresh.XXXXXX")
clone="$base/clone"
results="$base/results.tsv"
: >"$results"
up_started=0

cleanup() {
  local rc=$?
  set +e
  # Straight to the clone's railyard, not make: a failed set-up must not rerun as a second cold build.
  if [ "$up_started" = 1 ] && [ -x "$clone/.venv/bin/railyard" ] && [ -e "$clone/.railyard/bin/pulumi" ]; then
    echo "fresh-check: cleaning up stack $stack" >&2
    (cd "$clone" && .venv/bin/railyard down --stack "$stack" >/dev/null 2>&1
     .venv/bin/railyard lab gc --all >/dev/null 2>&1)
  fi
  if [ -n "$(lab_objects)" ]; then
    echo "fresh-check: lab objects of '$stack' remain; keeping $base for inspection" >&2
    echo "  (cd $clone && .venv/bin/railyard lab gc --all) removes them, then rm -rf $base" >&2
  else
    rm -rf "$base"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "fresh-check: HEAD ${commit:0:12} cloned into $clone; empty caches under $base"
git clone --quiet --no-hardlinks "$src" "$clone"
sed -e "s#cidr: 198.18.32.0/20#cidr: $storage#" -e "s#cidr: 198.18.0.0/20#cidr: $mgmt#" -e '/^encryptionsalt:/d' \
  "$clone/stacks/Pulumi.lab.yaml" >"$clone/stacks/Pulumi.$stack.yaml"
grep -q "cidr: $mgmt" "$clone/stacks/Pulumi.$stack.yaml" && grep -q "cidr: $storage" "$clone/stacks/Pulumi.$stack.yaml" \
  || { echo "fresh-check: could not retarget the lab stack file's networks" >&2; exit 1; }

# Empty caches; nothing of the developer's environment that would find an existing build.
export RAILYARD_CACHE="$base/cache/railyard" XDG_CACHE_HOME="$base/cache/xdg" PIP_CACHE_DIR="$base/cache/pip"
export GOPATH="$base/go" GOMODCACHE="$base/go/pkg/mod" GOCACHE="$base/cache/go-build"
unset RAILYARD_ROOT PULUMI_HOME PULUMI_BACKEND_URL VIRTUAL_ENV PYTHONPATH
# The clone's make starts as from a user's shell, with its own -j: not as a child of `make
# fresh-check`, whose jobserver it cannot reach (it would fall back to -j1 and overlap nothing).
unset MAKEFLAGS MFLAGS MAKELEVEL
# No pulumi on PATH at all: a compatible one would be used instead of the build being rehearsed.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | while read -r d; do [ -x "$d/pulumi" ] || printf '%s\n' "$d"; done \
       | grep -v -e '/\.railyard/bin' -e '/\.venv/bin' | paste -sd:)
export PATH

installed=()
for pkg in $(bash "$src/scripts/host-deps.sh" --list); do
  # Installed, not merely known: a removed package keeps its config files ("rc") and dpkg -s still succeeds.
  [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] && installed+=("$pkg")
done
echo "fresh-check: cannot reset Debian packages already installed: ${installed[*]:-none}"
echo "fresh-check: stack $stack, management $mgmt, storage $storage"

step() {
  local name=$1; shift
  local start end rc
  echo "fresh-check: == $name =="
  start=$(date +%s)
  set +e
  (cd "$clone" && "$@") 2>&1 | tee "$base/step.log"
  rc=${PIPESTATUS[0]}
  set -e
  end=$(date +%s)
  printf '%s\t%s\t%s\n' "$name" "$((end - start))" "$rc" >>"$results"
  # The set-up steps it ran (scripts/timed.sh's lines), as rows under it; they overlap (make -j).
  sed -n "s/^railyard: set-up step '\(.*\)' took \([0-9]*\) s.*/  \1\t\2\t-/p" "$base/step.log" >>"$results"
  echo "fresh-check: $name: exit $rc after $((end - start)) s"
  return "$rc"
}

failed=0
up_started=1  # from here on, an interrupt or a failure cleans up what make up made
step "make up" make up STACK="$stack" || failed=1
if [ "$failed" = 0 ] && [[ $(readlink -f "$clone/.railyard/bin/pulumi") != "$RAILYARD_CACHE"/* ]]; then
  echo "fresh-check: the clone's pulumi is $(readlink -f "$clone/.railyard/bin/pulumi"), not a build in the empty cache" >&2
  failed=1
fi
# The default stack has no Kubernetes layer: its first `make up` must not have waited for the provider.
if [ "$failed" = 0 ] && compgen -G "$RAILYARD_CACHE/bin/kubernetes-*" >/dev/null; then
  echo "fresh-check: make up of a stack without Kubernetes built the Kubernetes provider" >&2
  failed=1
fi
if [ "$failed" = 0 ]; then
  step "make preview" make preview STACK="$stack" || failed=1
fi
if [ "$failed" = 0 ]; then
  step "make down" make down STACK="$stack" || failed=1
fi
if [ "$failed" = 0 ]; then
  step "make test" make test || failed=1
fi

mkdir -p "$src/.railyard/fresh-check"
python3 - "$results" "$commit" "$src/.railyard/fresh-check/last.json" <<'EOF'
import datetime, json, os, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
steps, parts = [], []
for name, t, rc in rows:
    if name.startswith("  "):  # a set-up step inside the make target above it
        steps[-1].setdefault("set-up", []).append({"step": name.strip(), "seconds": int(t)})
    else:
        steps.append({"step": name, "seconds": int(t), "exit": int(rc)})
doc = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "commit": sys.argv[2], "root": os.environ.get("FRESH_ROOT", "this machine (Debian packages not reset)"),
       "steps": steps, "passed": bool(steps) and all(s["exit"] == 0 for s in steps) and len(steps) == 4}
json.dump(doc, open(sys.argv[3], "w"), indent=2)
print(f"\nfresh-check of {sys.argv[2][:12]} on {doc['date']} in {doc['root']}: "
      f"{'passed' if doc['passed'] else 'FAILED'}")
print("| step | time | exit |\n|---|---|---|")
fmt = lambda n: f"{n // 60} min {n % 60:02d} s"
for s in steps:
    print(f"| `{s['step']}` | {fmt(s['seconds'])} | {s['exit']} |")
    for part in s.get("set-up", []):  # overlapping (make -j3), so they need not add up
        print(f"| &nbsp;&nbsp;set-up: {part['step']} | {fmt(part['seconds'])} | |")
EOF
exit "$failed"
