#!/usr/bin/env bash
# Installs the Debian packages Railyard's lab and tests use, only those missing, so reruns are free.
# --list: print the packages it manages, one a line, and install nothing (make fresh-check reports
# which of them were already there).
set -euo pipefail
declare -A want=(
  [sshd]=openssh-server
  [ssh]=openssh-client
  [ip]=iproute2
  [traceroute]=traceroute
  [mkfs.xfs]=xfsprogs
  [mkfs.ext4]=e2fsprogs
  [losetup]=mount
  [ping]=iputils-ping
  [ps]=procps
  [nsenter]=util-linux
  [setpriv]=util-linux
  [blkid]=util-linux
  [findmnt]=util-linux
  [curl]=curl
  # The fabric sweep (railyard fabric sweep): ibsim-utils brings libumad2sim0, the preload library.
  [ibsim]=ibsim-utils
  [opensm]=opensm
  [ibnetdiscover]=infiniband-diags
  # RoCE switches of the lab as routers (zebra, bgpd under watchfrr, one pathspace per switch).
  [vtysh]=frr
  # Slurm in the lab's nodes (railyard:slurm): munge for its authentication, the controller and the
  # node daemon, and the client commands (scontrol, sbatch) the tests and users run.
  [munged]=munge
  [slurmctld]=slurmctld
  [slurmd]=slurmd
  [scontrol]=slurm-client
  # LLDP on a RoCE stack's rails and switches (railyard verify reads the cabling from it).
  [lldpd]=lldpd
  [lldpcli]=lldpd
  # Acceptance's bandwidth probes between the lab's nodes (ib_write_bw needs RDMA devices it lacks).
  [iperf3]=iperf3
  # The virtual layout's libvirt domains, checked against libvirt's own schemas (libvirt0 ships them)
  # by virt-xml-validate (which runs xmllint) and defined on virsh's daemonless test driver.
  [virsh]=libvirt-clients
  [virt-xml-validate]=libvirt-clients
  [xmllint]=libxml2-utils
)
# md (software RAID) for the lab's local cache only where the kernel offers it (storage.py).
if [ -e /proc/mdstat ]; then want[mdadm]=mdadm; fi
# Packages that bring no command of their own, each with the check that it is there.
# The system Python is what Ansible runs modules with on the lab's nodes (they share the host's
# /usr); the dataset_cache role talks S3 through boto3 there, as it would on a real host.
has_boto3() { /usr/bin/python3 -c 'import boto3' >/dev/null 2>&1; }
# srun --mpi=pmix, what MPI builds of nccl-tests launch with (Open MPI 5, HPC-X): Debian's mpi/pmix
# plugin opens pmix2/lib/libpmix.so, which libpmix-dev ships and libpmix2 (the library) does not.
has_libpmix_dev() { dpkg-query -W -f='${Status}' libpmix-dev 2>/dev/null | grep -q "ok installed"; }
declare -A checked=([python3-boto3]=has_boto3 [libpmix-dev]=has_libpmix_dev)
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${want[@]}" "${!checked[@]}" | sort -u
  exit 0
fi
missing=()
for cmd in "${!want[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/sbin/$cmd" ] || missing+=("${want[$cmd]}")
done
for pkg in "${!checked[@]}"; do
  "${checked[$pkg]}" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "railyard: missing host packages: ${missing[*]} (install them as root: apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "railyard: installing host packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# opensm's package would start a subnet manager on any real HCA of this machine; Railyard runs it
# only against ibsim. frr's would start routing daemons in the host's own namespace, lldpd's would
# speak LLDP on the host's own NICs, and munge's and Slurm's daemons would run on the host itself. No service starts during the install (policy-rc.d), and
# systemd's are disabled.
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
fi
trap 'if [ -n "$own_policy" ]; then rm -f "$policy"; fi' EXIT
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The lab runs FRR and lldpd only inside its own switch namespaces and nodes, and munged, Slurm and
# iperf3 only inside its nodes.
for unit in opensm.service frr.service lldpd.service munge.service slurmctld.service slurmd.service iperf3.service; do
  if [ -d /run/systemd/system ] && systemctl list-unit-files "$unit" >/dev/null 2>&1; then
    systemctl disable --now "$unit" >/dev/null 2>&1 || true
  fi
done
