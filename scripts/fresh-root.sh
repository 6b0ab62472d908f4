#!/usr/bin/env bash
# make fresh-root-check: make fresh-check in a Debian 12 root that has none of the project's
# packages, so the apt step and the first install of frr, opensm, slurm and the rest are timed too
# (on the developer's own machine they are installed already and cannot be reset).
#
# The root is what a fresh machine of this kind has before the project's set-up runs, and no more:
#   - Debian 12 minbase from debootstrap, plus python3.11 with venv, git, make, gcc, ca-certificates,
#     and iproute2 and procps (priority "important": every Debian install but minbase has them);
#   - the machine's Go toolchain (/usr/local/go), bound read-only: no Debian package carries the Go
#     the project builds with, and a fresh machine has it installed;
#   - the machine's registry settings: apt sources, DNS, CA bundle, pip's and Go's configuration.
# The lab needs of it: root; / a mount point and the root of its mount namespace (pivot_root); /proc, /sys and /dev of the host (rbind), a tmpfs /run for
# `ip netns`' mounts; the host kernel's namespaces, veth, bridge, loop and tmpfs. It shares the host's
# network namespace (so the registries are reached), which is why fresh-check's own stack takes
# networks no route of this machine uses, as it does outside a root.
#
# The base root is cached (~/.cache/railyard-fresh-root, keyed by the list above); each run unpacks
# it into a new directory, runs scripts/fresh-check.sh there on a clone of HEAD, copies the result to
# .railyard/fresh-check/ and removes the root. Takes a cold build, the Debian installs and the suite:
# about an hour and a quarter on 2 cores. Never beside another test run.
#
# FRESH_ROOT_RUN='COMMAND' runs COMMAND in the clone instead of the rehearsal, to look into what
# fails only in a fresh root (for example 'make venv deps && .venv/bin/pytest -rfE tests/roles').
set -euo pipefail

src=$(git rev-parse --show-toplevel)
cd "$src"
if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-root: needs root (debootstrap, chroot, and the lab inside it)" >&2
  exit 2
fi
commit=$(git rev-parse HEAD)
suite=bookworm
include=python3,python3.11,python3.11-venv,python3-venv,git,make,gcc,libc6-dev,ca-certificates,iproute2,procps
cache=${XDG_CACHE_HOME:-$HOME/.cache}/railyard-fresh-root
key=$(printf '%s %s' "$suite" "$include" | sha256sum | cut -c1-16)
tarball="$cache/$suite-minbase-$key.tar"

# The mirror this machine's apt already uses (its sources file), never a host written here.
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "'$suite'" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
if [ -z "$mirror" ]; then
  echo "fresh-root: no Debian mirror in this machine's apt sources" >&2
  exit 2
fi

work=$(mktemp -d /srv/railyard-fresh-root.XXXXXX)
root="$work/root"
mounted=()
cleanup() {
  local rc=$?
  set +e
  # Nothing may outlive the rehearsal inside its root: a process left there would keep the mounts.
  local ns=
  [ -z "${inner:-}" ] || ns=$(readlink "/proc/$inner/ns/mnt" 2>/dev/null || true)
  if [ -n "$ns" ]; then
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$ns" ] && kill -9 "${p#/proc/}" 2>/dev/null
    done
  fi
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[$i]}" 2>/dev/null || umount -R -l "${mounted[$i]}"
  done
  if grep -qF " $root" /proc/self/mountinfo; then
    echo "fresh-root: mounts remain under $root; keeping $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(date +%s)
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "fresh-root: installing debootstrap on this machine" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
  echo "fresh-root: debootstrap $suite (minbase + $include)"
  debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$root/var/cache/apt/archives/"*.deb
  mkdir -p "$cache"
  tar -C "$root" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
else
  mkdir -p "$root"
  tar -C "$root" -xf "$tarball"
fi
echo "fresh-root: base root ready in $(( $(date +%s) - t0 )) s: $root"

# The machine's registry settings, as a fresh machine of this kind has them.
cp /etc/resolv.conf /etc/hosts "$root/etc/"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
rm -f "$root/etc/apt/sources.list"
cp -r /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/"
[ ! -e /etc/pip.conf ] || cp /etc/pip.conf "$root/etc/pip.conf"

bind() {  # bind SOURCE TARGET [ro]
  mkdir -p "$2"
  mount --rbind "$1" "$2"
  mount --make-rslave "$2"
  [ "${3:-}" != ro ] || mount -o remount,bind,ro "$2"
  mounted+=("$2")
}
# The root is a mount point of its own, as / is on a machine: `ip -n NS` remounts / as a slave in
# the namespace it enters, which fails on a directory that is not one.
mount --bind "$root" "$root" && mounted+=("$root")
bind /proc "$root/proc"
bind /sys "$root/sys"
bind /dev "$root/dev"
mkdir -p "$root/run" && mount -t tmpfs -o mode=755 railyard-fresh-run "$root/run" && mounted+=("$root/run")
bind /usr/local/go "$root/usr/local/go" ro
[ ! -d /opt/wheels ] || bind /opt/wheels "$root/opt/wheels" ro

git clone --quiet --no-hardlinks "$src" "$root/root/railyard"
# fresh-check, inside, names which of the project's packages the root has before set-up.
echo "fresh-root: HEAD ${commit:0:12} cloned into the root"

# The machine's environment, and nothing of this checkout's: no venv, no cache, no pulumi on PATH.
env_keep=()
for v in GOFLAGS GOTOOLCHAIN PIP_DEFAULT_TIMEOUT PIP_DISABLE_PIP_VERSION_CHECK PIP_CERT PIP_FIND_LINKS \
         PIP_INDEX_URL PIP_TRUSTED_HOST; do
  [ -z "${!v:-}" ] || env_keep+=("$v=${!v}")
done
# Not a plain chroot: the lab enters its nodes' mount namespaces (setns), and setns sets the
# caller's root to its namespace's root, which for a chroot is still the host's /. In a mount
# namespace of its own whose root is pivoted to the root, the namespace's root is the root.
set +e
unshare --mount --propagation private -- /bin/sh -c \
  'cd "$1" && mkdir -p .old-root && pivot_root . .old-root && umount -l /.old-root && rmdir /.old-root && shift \
   && cd / && exec "$@"' sh "$root" \
  /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
  PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${env_keep[@]}" \
  FRESH_ROOT="debootstrap $suite minbase" bash -c "cd /root/railyard && ${FRESH_ROOT_RUN:-bash scripts/fresh-check.sh}" &
inner=$!
wait "$inner"
rc=$?
set -e
mkdir -p "$src/.railyard/fresh-check"
if [ -e "$root/root/railyard/.railyard/fresh-check/last.json" ]; then
  cp "$root/root/railyard/.railyard/fresh-check/last.json" "$src/.railyard/fresh-check/last-root.json"
  echo "fresh-root: result in .railyard/fresh-check/last-root.json"
fi
exit "$rc"
