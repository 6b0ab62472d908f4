#!/bin/bash
# Lab node stand-in for commands that would restart the machine or rewrite its bootloader.
#
# Lab nodes share the host's kernel, so a reboot or a bootloader change requested inside a node is
# recorded as "reboot pending" instead of done. The convention (docs/lab.md):
#   /run/railyard/reboot-pending  one line per request: <unix time> TAB <kind> TAB <command line>,
#                                 kind one of reboot, poweroff, bootloader
#   /run/reboot-required          Debian's flag file, so roles that check it see the reboot
# /run is the node's tmpfs, so a node's restart (delete and create) clears both, as a reboot would.
# Any other systemctl verb goes to the real systemctl, which has no service manager to talk to in a
# node and says so.
set -u
name=${0##*/}
kind=""

case "$name" in
  reboot) kind=reboot ;;
  poweroff|halt) kind=poweroff ;;
  shutdown)
    kind=poweroff
    for a in "$@"; do
      case "$a" in
        -c) echo "shutdown: nothing to cancel in a lab node" >&2; exit 0 ;;
        -r|--reboot) kind=reboot ;;
        -k) exit 0 ;;
      esac
    done ;;
  telinit|init)
    case "${1:-}" in 6) kind=reboot ;; 0) kind=poweroff ;; esac ;;
  kexec) kind=reboot ;;
  systemctl)
    verb=""
    for a in "$@"; do case "$a" in -*) ;; *) verb=$a; break ;; esac; done
    case "$verb" in
      reboot|kexec|soft-reboot) kind=reboot ;;
      poweroff|halt) kind=poweroff ;;
      start|isolate)
        for a in "$@"; do
          case "$a" in
            reboot.target|kexec.target|soft-reboot.target) kind=reboot ;;
            poweroff.target|halt.target) kind=poweroff ;;
          esac
        done ;;
    esac ;;
  grub-mkconfig|grub2-mkconfig|update-grub|update-grub2|grub-install|grub2-install|grubby|update-initramfs|dracut|kernel-install)
    kind=bootloader ;;
esac

if [ -z "$kind" ]; then
  if [ "$name" = systemctl ] && [ -x /run/railyard/real-systemctl ]; then
    exec -a systemctl /run/railyard/real-systemctl "$@"
  fi
  echo "$name: not available in a lab node (railyard lab shim)" >&2
  exit 1
fi

mkdir -p /run/railyard
printf '%s\t%s\t%s\n' "$(date +%s)" "$kind" "$name${*:+ $*}" >> /run/railyard/reboot-pending
echo "*** System restart required ***" > /run/reboot-required
echo "railyard lab: '$name${*:+ $*}' recorded as pending ($kind) in /run/railyard/reboot-pending; the host is unchanged" >&2
exit 0
