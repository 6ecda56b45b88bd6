#!/usr/bin/env bash
# Builds a cached cgroup v2 Debian 13 (trixie) guest for QEMU software
# emulation (TCG), for hack/guest/run.sh. Needs root (apt-get, debootstrap,
# mknod, mkfs).
#
# Output: _output/guest/<key>/{vmlinuz,initrd.img,rootfs.img,done}
# and the symlink _output/guest/current -> <key>, which run.sh boots. A build
# removes the images of other keys.
#   vmlinuz     trixie's kernel (6.12 LTS), the linux-image-* package that
#               trixie's linux-image-amd64 depends on
#   initrd.img  busybox initramfs: loads virtio and ext4, mounts /dev/vda and
#               switch_roots to /sbin/dra-swap-guest-init (hack/guest/init)
#   rootfs.img  ext4 (8G, sparse): debootstrap minbase with what a single-node
#               cluster needs and the kernel's modules
#
# The build is skipped when <key>/done exists. The key is the sha256 of the
# kernel package and version, the suite, the package list and the packages'
# versions, the disk size, and the contents of hack/guest/*.sh and the init
# files. Versions come from trixie's own package lists,
# which apt keeps apart from the host's in _output/guest/apt (the host may run
# another release): a cache hit reads the lists of the last cold build and
# needs neither the network nor root (when the host tools are installed); a
# cold build refreshes them first. Kubernetes, containerd, CRI-O and the
# driver are not in the image: hack/e2e-cluster.sh shares them over 9p at run
# time. The image has both runtimes' Debian parts (runc; crun and conmon), so
# one image serves both node configurations (GUEST_RUNTIME).
#
# Environment:
#   GUEST_KERNEL_PKG a kernel package to boot instead (for example
#                    trixie-backports' linux-image-*-amd64)
#   GUEST_MIRROR     Debian mirror for debootstrap (default http://deb.debian.org/debian)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

log() { printf '[guest-build %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

GUEST_DIR=$REPO/_output/guest
SUITE=trixie
MIRROR=${GUEST_MIRROR:-http://deb.debian.org/debian}
DISK_SIZE=8G
PACKAGES="systemd,systemd-sysv,dbus,runc,crun,conmon,iproute2,ca-certificates,util-linux,mount,kmod,procps,busybox,containernetworking-plugins,openssl,curl,bash,coreutils,findutils,grep,sed,gawk,e2fsprogs,iptables"
# Modules the initramfs loads (with their dependencies and soft dependencies,
# as modprobe resolves them) to mount an ext4 root on virtio-blk.
INITRAMFS_MODULES="crc32c_generic virtio_pci virtio_blk ext4"
HOST_TOOLS=(qemu-system-x86 debootstrap busybox-static cpio e2fsprogs kmod xz-utils zstd gzip util-linux coreutils)

start=$(date +%s.%N)
elapsed() { echo "$(date +%s.%N) $start" | awk '{printf "%.1f", $1 - $2}'; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root: $*"; }

# --- host tools
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }
# One apt at a time (hack/install-deps.sh takes the same lock): make test
# builds the guest image while the cluster's build installs packages.
APT_LOCK=/run/lock/dra-swap-apt.lock
apt_updated=0
apt_update() {
	if [ "$apt_updated" = 0 ] && [ "$(id -u)" = 0 ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive flock "$APT_LOCK" apt-get update -q >/dev/null
		apt_updated=1
	fi
}
missing=()
for pkg in "${HOST_TOOLS[@]}"; do installed "$pkg" || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
	need_root "apt-get must install ${missing[*]}"
	apt_update
	log "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive flock "$APT_LOCK" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- trixie's package lists, apart from the host's: apt with its own
# sources, lists and cache under GUEST_DIR/apt, and no installed packages.
APT_DIR=$GUEST_DIR/apt
guest_apt_opts=(
	-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o Dir::Etc::SourceParts=/nonexistent
	-o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::State::Status=$APT_DIR/status" -o "Dir::Cache=$APT_DIR/cache"
	-o Dir::Etc::Preferences=/nonexistent -o Dir::Etc::PreferencesParts=/nonexistent
	-o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o APT::Sandbox::User=root
)
guest_apt_lists() { compgen -G "$APT_DIR/lists/*_Packages*" >/dev/null; }
guest_apt_update() {
	mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
	: >"$APT_DIR/status"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $SUITE main" >"$APT_DIR/sources.list"
	log "apt-get update ($SUITE's package lists, in $APT_DIR)"
	DEBIAN_FRONTEND=noninteractive flock "$APT_LOCK" apt-get "${guest_apt_opts[@]}" update -q >/dev/null
}
guest_apt_cache() { apt-cache "${guest_apt_opts[@]}" "$@"; }

# --- the key
kernel_pkg='' kernel_ver=''
resolve_kernel() {
	kernel_pkg=${GUEST_KERNEL_PKG:-$(guest_apt_cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')}
	[ -n "$kernel_pkg" ] || die "cannot resolve the kernel package that $SUITE's linux-image-amd64 depends on"
	kernel_ver=$(guest_apt_cache show --no-all-versions "$kernel_pkg" 2>/dev/null | awk '$1 == "Version:" {print $2; exit}')
	[ -n "$kernel_ver" ] || die "no version of $kernel_pkg is available in $SUITE"
}

# package_versions: the versions debootstrap will install of the listed
# packages, as trixie's package lists say.
package_versions() {
	# shellcheck disable=SC2046 # a list of package names
	guest_apt_cache show --no-all-versions $(echo "$PACKAGES" | tr ',' ' ') 2>/dev/null |
		awk '$1 == "Package:" {p = $2} $1 == "Version:" {print "package: " p " " $2}' || true
}

key_inputs() {
	echo "kernel: $kernel_pkg $kernel_ver"
	echo "suite: $SUITE"
	echo "packages: $PACKAGES"
	package_versions
	echo "initramfs-modules: $INITRAMFS_MODULES"
	echo "disk-size: $DISK_SIZE"
	local f
	for f in "$HERE"/*.sh "$HERE"/init "$HERE"/*-init "$HERE"/*.service; do
		if [ -f "$f" ]; then
			echo "file: hack/guest/$(basename "$f") $(sha256sum <"$f" | cut -d' ' -f1)"
		fi
	done
}
compute_key() {
	inputs=$(key_inputs | LC_ALL=C sort -u)
	key=$(printf '%s\n' "$inputs" | sha256sum | cut -d' ' -f1)
}

set_current() {
	ln -sfn "$key" "$GUEST_DIR/current.tmp"
	mv -Tf "$GUEST_DIR/current.tmp" "$GUEST_DIR/current"
}
key=''
cache_hit() {
	if [ -n "$key" ] && [ -f "$GUEST_DIR/$key/done" ]; then
		set_current
		log "cache hit: $GUEST_DIR/$key (kernel $kernel_pkg $kernel_ver) in $(elapsed) s"
		echo "key: $key"
		return 0
	fi
	return 1
}

mkdir -p "$GUEST_DIR"
if guest_apt_lists; then
	resolve_kernel
	compute_key
	log "key $key"
	cache_hit && exit 0
fi

need_root "a cold build runs apt-get, debootstrap, mknod and mkfs"
# One build at a time; another may have finished it while we waited.
exec 9>"$GUEST_DIR/.lock"
flock 9
cache_hit && exit 0

# A cold build: refresh trixie's package lists first, so that the kernel
# version (and so the key) is the current one and downloadable.
guest_apt_update
resolve_kernel
compute_key
cache_hit && exit 0
log "building $GUEST_DIR/$key (kernel $kernel_pkg $kernel_ver)"

build=$GUEST_DIR/$key.build
umount_under() { # unmounts whatever (debootstrap) left mounted under $1
	local m
	findmnt -rn -o TARGET | awk -v p="$1/" 'index($0, p) == 1' | sort -r | while read -r m; do
		umount -l "$m" || true
	done
}
cleanup() {
	if [ -d "$build" ]; then
		umount_under "$build"
		rm -rf --one-file-system "$build"
	fi
}
trap cleanup EXIT
cleanup
rm -rf "${GUEST_DIR:?}/$key"
mkdir -p "$build/kernel" "$build/initramfs" "$build/out"

# --- kernel
t=$SECONDS
(cd "$build/kernel" && apt-get "${guest_apt_opts[@]}" download -q "$kernel_pkg=$kernel_ver" >/dev/null)
dpkg -x "$build/kernel/${kernel_pkg}_"*.deb "$build/kernel/x"
kdir=$build/kernel/x
# trixie's kernel keeps its modules in /usr/lib/modules (merged /usr);
# depmod and modprobe -d look in <dir>/lib/modules.
if [ ! -d "$kdir/lib/modules" ] && [ -d "$kdir/usr/lib/modules" ]; then
	ln -s usr/lib "$kdir/lib"
fi
kver=$(basename "$(find "$kdir/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
if [ -z "$kver" ] || [ ! -f "$kdir/boot/vmlinuz-$kver" ]; then
	die "no kernel or modules in $kernel_pkg"
fi
depmod -b "$kdir" "$kver"
cp "$kdir/boot/vmlinuz-$kver" "$build/out/vmlinuz"
log "kernel $kver ($kernel_pkg $kernel_ver) in $((SECONDS - t)) s"

# copy_module SRC DEST: a module, decompressed (busybox insmod takes plain .ko).
copy_module() {
	case $1 in
	*.ko) cp "$1" "$2" ;;
	*.ko.xz) xz -dc "$1" >"$2" ;;
	*.ko.zst) zstd -qdc "$1" >"$2" ;;
	*.ko.gz) gzip -dc "$1" >"$2" ;;
	*) die "unknown module format: $1" ;;
	esac
}

# --- initramfs
t=$SECONDS
ird=$build/initramfs
mkdir -p "$ird/bin" "$ird/dev" "$ird/proc" "$ird/sys" "$ird/newroot" "$ird/lib/modules"
cp /bin/busybox "$ird/bin/busybox"
file_type=$(LC_ALL=C readelf -l /bin/busybox 2>/dev/null | grep -c INTERP || true)
[ "$file_type" = 0 ] || die "/bin/busybox is not static: install busybox-static"
mknod -m 600 "$ird/dev/console" c 5 1
mknod -m 666 "$ird/dev/null" c 1 3
install -m 0755 "$HERE/initramfs-init" "$ird/init"
# shellcheck disable=SC2086 # a list of module names
modprobe -d "$kdir" -S "$kver" --show-depends -a $INITRAMFS_MODULES | awk '$1 == "insmod" && !seen[$2]++ {print $2}' >"$build/initramfs.modules"
: >"$ird/lib/modules/load-order"
while read -r path; do
	name=$(basename "$path" | sed -E 's/\.ko(\.(xz|zst|gz))?$//').ko
	copy_module "$path" "$ird/lib/modules/$name"
	echo "$name" >>"$ird/lib/modules/load-order"
done <"$build/initramfs.modules"
grep -q '^ext4\.ko$' "$ird/lib/modules/load-order" || die "ext4 is not among the initramfs modules"
(cd "$ird" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet) | gzip -9n >"$build/out/initrd.img"
log "initramfs ($(tr '\n' ' ' <"$ird/lib/modules/load-order" | sed 's/\.ko//g')) in $((SECONDS - t)) s"

# --- root filesystem
t=$SECONDS
root=$build/rootfs
mkdir -p "$GUEST_DIR/debs"
log "debootstrap $SUITE (minbase + $PACKAGES)"
if ! debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$GUEST_DIR/debs" \
	"$SUITE" "$root" "$MIRROR" >"$build/debootstrap.out" 2>&1; then
	tail -n 30 "$build/debootstrap.out" >&2
	[ -f "$root/debootstrap/debootstrap.log" ] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
	die "debootstrap failed"
fi
umount_under "$build"
log "debootstrap in $((SECONDS - t)) s"

t=$SECONDS
mkdir -p "$root/lib/modules"
cp -a "$kdir/lib/modules/$kver" "$root/lib/modules/"
depmod -b "$root" "$kver"
install -m 0755 "$HERE/init" "$root/sbin/dra-swap-guest-init"
mkdir -p "$root/opt/dra-swap-e2e/bin" "$root/share"
echo dra-swap-guest >"$root/etc/hostname"
cat >"$root/etc/hosts" <<'HOSTS'
127.0.0.1	localhost
127.0.1.1	dra-swap-guest
10.200.0.2	dra-swap-guest-node
::1	localhost ip6-localhost ip6-loopback
HOSTS
# No network: a resolver that answers nothing, but a valid file for the kubelet.
echo "nameserver 127.0.0.1" >"$root/etc/resolv.conf"
: >"$root/etc/fstab"
echo "${key:0:32}" >"$root/etc/machine-id"
# systemd is PID 1 (as on production nodes, for the systemd cgroup driver);
# it starts dbus (runc's systemd driver talks to systemd over it) and
# dra-swap-guest.service, which runs hack/guest/init: the node's set-up,
# /share/run.sh, power-off. Nothing else: no getty, no timers.
install -m 0644 "$HERE/dra-swap-guest.service" "$root/etc/systemd/system/dra-swap-guest.service"
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sfn /etc/systemd/system/dra-swap-guest.service "$root/etc/systemd/system/multi-user.target.wants/dra-swap-guest.service"
ln -sfn /lib/systemd/system/multi-user.target "$root/etc/systemd/system/default.target"
# etcd.service is the etcd-server package's own etcd: up.sh starts the
# cluster's etcd, and a second, idle one costs the emulated node CPU.
for unit in etcd.service getty@tty1.service serial-getty@ttyS0.service getty.target apt-daily.timer apt-daily-upgrade.timer \
	fstrim.timer e2scrub_all.timer e2scrub_reap.service systemd-timesyncd.service dpkg-db-backup.timer; do
	ln -sfn /dev/null "$root/etc/systemd/system/$unit"
done
rm -f "$root"/var/cache/apt/archives/*.deb
rm -rf "$root/var/lib/apt/lists/"*
{
	echo "key: $key"
	echo "kernel: $kver"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	printf '%s\n' "$inputs"
} >"$root/etc/dra-swap-guest-release"
log "root filesystem: $(du -sh --one-file-system "$root" | cut -f1) in $((SECONDS - t)) s"

t=$SECONDS
mkfs.ext4 -q -F -m 0 -L dra-swap-root -E root_owner=0:0 -d "$root" "$build/out/rootfs.img" "$DISK_SIZE" >/dev/null
log "rootfs.img ($DISK_SIZE sparse, $(du -h "$build/out/rootfs.img" | cut -f1) used) in $((SECONDS - t)) s"

printf '%s\n' "$inputs" >"$build/out/key-inputs.txt"
echo "$kver" >"$build/out/kernel-release"
touch "$build/out/done"
mv -T "$build/out" "$GUEST_DIR/$key"
set_current
# Older images are not booted again (current names the new one); a guest
# still running from one keeps its open file.
for old in "$GUEST_DIR"/*; do
	b=$(basename "$old")
	if [[ $b =~ ^[0-9a-f]{64}$ ]] && [ "$b" != "$key" ]; then
		rm -rf --one-file-system "$old"
		log "removed the old image $b"
	fi
done
log "built $GUEST_DIR/$key (kernel $kver) in $(elapsed) s"
echo "key: $key"
