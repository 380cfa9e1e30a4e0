#!/usr/bin/env bash
# boot.sh IMAGE SHARE [TIMEOUT]: boots the OpenZFS guest made by image.sh
# (its directory IMAGE) with the host directory SHARE as its 9p share; the
# guest runs SHARE/run.sh, writes run.log and run.rc there, and powers
# off. No network device; a fresh scratch disk at /var/tmp; the root disk
# in snapshot mode (every run starts from the image). Software emulation
# (TCG) unless /dev/kvm can boot a stock kernel. Exits with run.rc.
set -euo pipefail
img="$1" share="$2" limit="${3:-45m}"
[ -f "$img/root.raw" ] || { echo "boot.sh: no image in $img (tests/openzfs/image.sh)" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86 >/dev/null
accel=(-accel tcg,thread=multi -cpu max)
if [ -e /dev/kvm ] && grep -qE 'vmx|svm' /proc/cpuinfo && ! grep -q '^kvm_pvm' /proc/modules; then
  accel=(-accel kvm -cpu host)
fi
work="$(mktemp -d /var/tmp/ferry-openzfs.XXXXXX)"
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT HUP
truncate -s 16G "$work/scratch.raw"
mkfs.ext4 -q -F "$work/scratch.raw"
rm -f "$share/run.rc" "$share/run.log"
# --foreground: qemu stays in this script's process group, so that a
# caller stopping the lane's group (CI's exit) stops the guest too.
timeout --foreground "$limit" qemu-system-x86_64 "${accel[@]}" -smp 2 -m 4096 \
  -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
  -append "console=ttyS0 root=/dev/vda rw init=/ferry-init panic=-1 quiet" \
  -drive file="$img/root.raw",if=virtio,format=raw,snapshot=on \
  -drive file="$work/scratch.raw",if=virtio,format=raw,cache=unsafe \
  -virtfs local,path="$share",mount_tag=share,security_model=none,id=share \
  -device virtio-rng-pci -nic none -display none -monitor none \
  -serial file:"$share/console.log" -no-reboot || true
if [ ! -f "$share/run.rc" ]; then
  echo "boot.sh: the guest did not finish its run; the console's end:" >&2
  tail -30 "$share/console.log" >&2
  exit 1
fi
exit "$(cat "$share/run.rc")"
