#!/bin/bash
# A lab node's power supervisor: the part of a server that outlives its operating system.
# Started by node/power.py on the host (outside the node), one per node:
#   power.sh FIFO PYTHON CHECKOUT STACK NODE ROOT
# It holds FIFO open (so a writer never waits) and hands each request the node's shim writes there
# (reboot, poweroff) or the host does (poweron) to `python -m railyard.drivers.lab.node.power`, one
# at a time. It carries the node's environment marker, so deleting the node or `lab gc` ends it.
set -u
fifo=$1 py=$2 checkout=$3 stack=$4 node=$5 root=$6
exec 3<>"$fifo"
while read -r request <&3; do
  case "$request" in
    reboot|poweroff|poweron)
      (cd "$checkout" && "$py" -m railyard.drivers.lab.node.power "$request" "$stack" "$node" "$root" "$$") ;;
  esac
done
