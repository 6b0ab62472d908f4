"""Reaching machines Railyard did not start itself, whichever driver owns them: one SSH
connection (ssh), and the rolling reboot that applies boot-time settings (rollout), with its
Pulumi resource (reboots). The hosts driver reboots servers with it; the lab driver reboots its
nodes with the same code."""
