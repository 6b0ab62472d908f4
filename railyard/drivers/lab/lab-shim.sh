#!/bin/bash
# Lab node stand-in for commands that restart the machine or rewrite its bootloader.
#
# Lab nodes share the host's kernel, so the node's power is the lab's (docs/lab.md, "Reboot"):
#   reboot, poweroff   recorded, then handed to the node's power supervisor (node/power.py) through
#                      /run/railyard/power/fifo: the node goes down at once (SSH drops, every process
#                      ends, /run is cleared) and, for a reboot, boots again
#   update-grub, grub-mkconfig
#                      write the command line the next boot gets to /boot/railyard/cmdline, from the
#                      kernel's first command line and GRUB_CMDLINE_LINUX(_DEFAULT) of /etc/default/grub
#                      and /etc/default/grub.d/*.cfg, as grub-mkconfig reads them
# Every request is also one line of /run/railyard/reboot-pending: <unix time> TAB <kind> TAB <command
# line>, kind one of reboot, poweroff, bootloader; and /run/reboot-required is written, Debian's flag,
# until the reboot clears /run. Any other systemctl verb goes to the real systemctl, which has no
# service manager to talk to in a node and says so.
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

case "$name" in
  update-grub|update-grub2|grub-mkconfig|grub2-mkconfig)
    mkdir -p /boot/railyard
    # The kernel's own arguments, as first booted, are what every generated entry starts from.
    [ -f /boot/railyard/base-cmdline ] || cat /proc/cmdline > /boot/railyard/base-cmdline
    extra=$(
      GRUB_CMDLINE_LINUX="" GRUB_CMDLINE_LINUX_DEFAULT=""
      [ -f /etc/default/grub ] && . /etc/default/grub
      for f in /etc/default/grub.d/*.cfg; do [ -f "$f" ] && . "$f"; done
      echo "$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT"
    )
    line=$(echo $(cat /boot/railyard/base-cmdline) $extra)
    printf '%s\n' "$line" > /boot/railyard/cmdline.tmp && mv /boot/railyard/cmdline.tmp /boot/railyard/cmdline
    echo "railyard lab: the next boot's command line is: $line" >&2
    exit 0 ;;
esac

if [ "$kind" = reboot ] || [ "$kind" = poweroff ]; then
  # The supervisor holds the fifo open; if it is gone, the write would wait forever.
  if [ -p /run/railyard/power/fifo ] && timeout 5 bash -c 'printf "%s\n" "$1" > /run/railyard/power/fifo' _ "$kind"; then
    echo "railyard lab: $kind of $(hostname) requested" >&2
    exit 0
  fi
  echo "railyard lab: '$name${*:+ $*}' recorded as pending ($kind); the node has no power supervisor" >&2
  exit 0
fi
echo "railyard lab: '$name${*:+ $*}' recorded as pending ($kind) in /run/railyard/reboot-pending" >&2
exit 0
