#!/usr/bin/env bash
# image.sh SERIES: a Debian 12 guest with real OpenZFS (SERIES 2.3: from
# bookworm-backports; 2.1: bookworm's own), for the OpenZFS lane (issue 24):
# its kernel and initrd, and an ext4 root disk made without loop devices.
# Everything comes from Debian's archive through the host's configured
# mirror; the host's apt sources are never edited. The result is cached in
# ~/.cache/ferry/openzfs/<SERIES>-<recipe hash>/ and rebuilt when this
# recipe changes (a build is made in a .tmp directory and moved into place
# last: a killed build is never reused). Prints the image's directory.
set -euo pipefail
series="${1:-2.3}"
case "$series" in
2.3) pin='2.3.*' ;;
2.1) pin='2.1.*' ;;
*) echo "image.sh: SERIES must be 2.3 or 2.1" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "image.sh: run as root" >&2; exit 1; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${FERRY_CACHE:-$HOME/.cache/ferry}/openzfs"
key="$(cat "$here/image.sh" "$here/guest-init" | sha256sum | cut -c1-12)"
out="$cache/$series-$key"
log() { printf 'openzfs: %4ss  %s\n' "$SECONDS" "$*" >&2; }

if [ -f "$out/root.raw" ] && [ "${FERRY_OPENZFS_REBUILD:-}" != 1 ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
mirror="$(awk '/^URIs:/{u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
security="$(awk '/^URIs:/{u=$2} /^Suites:/ && /bookworm-security/ {print u; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
security="${security:-http://deb.debian.org/debian-security}"
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null

tmp="$out.tmp"
root="$tmp/root"
umount_all() {
  for m in "$root/dev" "$root/proc"; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
  return 0
}
trap umount_all EXIT
rm -rf "$tmp" && mkdir -p "$tmp"
log "debootstrap bookworm from $mirror"
debootstrap --variant=minbase --components=main,contrib \
  --include=procps,iproute2,kmod,initramfs-tools,ca-certificates,util-linux \
  bookworm "$root" "$mirror" >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates bookworm-backports
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
rm -f "$root/etc/apt/sources.list"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 0755 "$root/usr/sbin/policy-rc.d"
# OpenZFS of the series, whatever suite carries it (backports' newer
# kernel is never picked: nothing is installed with -t).
cat >"$root/etc/apt/preferences.d/ferry-zfs" <<PREF
Package: src:zfs-linux
Pin: version $pin
Pin-Priority: 1001
PREF
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
log "the guest's kernel"
in_root apt-get update -q >"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; exit 1; }
in_root apt-get install -y -q --no-install-recommends linux-image-amd64 linux-headers-amd64 >>"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; exit 1; }
kver="$(ls "$root/lib/modules" | head -n 1)"
log "OpenZFS $pin (DKMS builds its module for $kver)"
in_root apt-get install -y -q --no-install-recommends zfs-dkms zfsutils-linux >>"$tmp/apt.log" 2>&1 || { tail -30 "$tmp/apt.log" >&2; exit 1; }
if ! in_root dkms status -k "$kver" 2>/dev/null | grep -q 'installed'; then
  in_root dkms autoinstall -k "$kver" >>"$tmp/apt.log" 2>&1 || { tail -30 "$tmp/apt.log" >&2; exit 1; }
fi
modver="$(in_root modinfo -k "$kver" -F version zfs)"
case "$modver" in
"${pin%\*}"*) ;;
*) echo "image.sh: the zfs module is $modver, not $pin" >&2; exit 1 ;;
esac
in_root dpkg-query -W zfs-dkms zfsutils-linux "linux-image-$kver" >"$tmp/versions.txt"
log "zfs module $modver built"
install -m 0755 "$here/guest-init" "$root/ferry-init"
mkdir -p "$root/share" "$root/var/tmp"
echo 'options zfs zfs_arc_max=1073741824' >"$root/etc/modprobe.d/ferry.conf"
in_root update-initramfs -u -k "$kver" >>"$tmp/apt.log" 2>&1
in_root apt-get clean
rm -rf "$root"/var/lib/dkms/zfs/*/build "$root"/usr/src/linux-headers-*
cp "$root/boot/vmlinuz-$kver" "$tmp/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$tmp/initrd.img"
umount_all
truncate -s 4G "$tmp/root.raw"
mkfs.ext4 -q -F -L ferry-root -d "$root" "$tmp/root.raw"
rm -rf "$root"
for old in "$cache/$series-"*; do [ "$old" = "$out" ] || [ "$old" = "$tmp" ] || rm -rf "$old"; done
rm -rf "$out" && mv "$tmp" "$out"
log "image in $out"
echo "$out"
