#!/bin/sh
# A lab node's stand-in for dmesg (/run/railyard/bin/dmesg, first on its PATH). A lab node shares
# this machine's kernel, so the real ring buffer is the machine's, not the node's: this prints the
# node's own kernel messages instead, which only the lab's faults write (an NVIDIA Xid line, copied
# from real kernel logs; railyard/drivers/lab/faults.py), in dmesg's own format. Options are
# ignored. A real node runs util-linux's dmesg.
if [ -r /run/railyard/hw/dmesg ]; then
  cat /run/railyard/hw/dmesg
fi
exit 0
