#!/usr/bin/env bash
# nfs-vm.sh build|start [systemd]|stop|up|down — a small VM with the distribution kernel's real NFS
# client, for the nfs_multivip tiers that need kernel mounts (this machine's kernel has no NFS, and
# containers share it), and the lab's NFS node.
#
# build: Debian's kernel from its .deb (virtio, ext4, nfs modules), a debootstrap rootfs (python3,
#        python3-venv, openssh, nfs-common, netbase, iproute2), an ext4 image, a busybox initrd.
#        Cached under $LAB_STATE/vm, keyed by the kernel version and this script (~90 s when rebuilt).
# start: QEMU (TCG: this machine's /dev/kvm cannot run a stock kernel) inside the storage namespace of
#        nfs-storage.sh, NICs em1/em2 on its bridge through taps, management over QEMU user networking
#        (restrict=on: the VM reaches nothing) with SSH forwarded to 127.0.0.1:2222 in that namespace.
#        -snapshot: every boot starts from the built image.
# up:    the lab's NFS node for `make demo`: build, the storage namespace, start, each only if not
#        already there (a VM that runs keeps its state); inventory/lab_vm.py lists it while it runs.
# down:  stop the VM and the storage namespace (lab-down.sh does this after an `up`).
source "$(dirname "$0")/lib.sh"
need_root

VM_DIR=$LAB_STATE/vm
NS_STORAGE=dltune-nfs-storage
SSH_PORT=2222

kernel_version() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/{sub("linux-image-","",$2); print $2; exit}'
}

ensure_tools() {
  local missing=()
  for tool in qemu-system-x86_64 debootstrap cpio; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing qemu-system-x86, debootstrap, cpio (missing: ${missing[*]})"
  local packages=(qemu-system-x86 debootstrap cpio)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null; }
}

# modules_closure DESTROOT KROOT KV MODULE...: copy modules and their dependencies
modules_closure() {
  local dest=$1 kroot=$2 kv=$3; shift 3
  local files="" line module file
  for module in "$@"; do
    line=$(grep -E "/$module\.ko(\.[a-z]+)?:" "$kroot/lib/modules/$kv/modules.dep") || die "module $module not in $kv"
    files="$files ${line%%:*} ${line#*:}"
  done
  for file in $(echo "$files" | tr ' ' '\n' | sort -u); do
    mkdir -p "$dest/lib/modules/$kv/$(dirname "$file")"
    cp "$kroot/lib/modules/$kv/$file" "$dest/lib/modules/$kv/$file"
  done
  cp "$kroot/lib/modules/$kv"/modules.{builtin,builtin.modinfo,order} "$dest/lib/modules/$kv/"
}

# The systemd variant (tier 3, reboots): the same rootfs plus systemd as PID 1, udev naming the NICs
# by MAC and ifupdown configuring them, so the role's fstab entries and ifupdown route hook are what
# brings the mounts and routes back at boot.
systemd_variant() {
  rm -rf rootfs-sd; cp -a rootfs rootfs-sd
  cp /etc/resolv.conf rootfs-sd/etc/resolv.conf
  chroot rootfs-sd apt-get install -y -qq --no-install-recommends systemd-sysv ifupdown udev > apt-sd.log 2>&1 ||
    { tail -5 apt-sd.log >&2; die "cannot install systemd into the VM image"; }
  rm -f rootfs-sd/var/cache/apt/archives/*.deb rootfs-sd/etc/resolv.conf
  local spec
  for spec in em1:52:54:00:00:01:01 em2:52:54:00:00:01:02 mgmt0:52:54:00:12:34:56; do
    printf '[Match]\nMACAddress=%s\n[Link]\nName=%s\n' "${spec#*:}" "${spec%%:*}" \
      > "rootfs-sd/etc/systemd/network/10-${spec%%:*}.link"
  done
  cat > rootfs-sd/etc/network/interfaces <<'IFACES'
auto lo
iface lo inet loopback
auto mgmt0
iface mgmt0 inet static
    address 10.0.2.15/24
auto em1
iface em1 inet static
    address 10.21.115.122/24
auto em2
iface em2 inet static
    address 10.21.115.123/24
IFACES
  echo gpu-node-vm > rootfs-sd/etc/hostname
  echo 'net.ipv4.conf.all.arp_ignore=1' > rootfs-sd/etc/sysctl.d/10-lab.conf
  mke2fs -q -t ext4 -d rootfs-sd -L root rootfs-sd.img 1536M
  rm -rf rootfs-sd
}

build() {
  ensure_tools
  local kv key mirror deps
  kv=$(kernel_version); [ -n "$kv" ] || die "no linux-image-amd64 in the apt sources"
  # Rebuilt when this script, the kernel or dltune's dependencies (the wheelhouse, without dltune) change.
  deps=$(ls "$WHEELHOUSE" 2>/dev/null | grep -v '^dltune-' || true)
  key=$( (cat "$0"; echo "$deps") | sha256sum | cut -c1-12)-$kv
  if [ -s "$VM_DIR/built" ] && [ "$(cat "$VM_DIR/built")" = "$key" ]; then
    log "VM image up to date ($key)"; return 0
  fi
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
  mirror=${mirror:-$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)}
  rm -rf "$VM_DIR"; mkdir -p "$VM_DIR/kdeb" "$VM_DIR/ssh"; cd "$VM_DIR"
  (cd kdeb && apt-get download -qq "linux-image-$kv" busybox-static 2>/dev/null) ||
    die "cannot download linux-image-$kv and busybox-static"
  dpkg-deb -x kdeb/linux-image-"${kv}"_*.deb kroot
  # the initrd has no libc: a static busybox, taken from its package without installing it here
  dpkg-deb -x kdeb/busybox-static_*.deb bbroot
  local busybox=$VM_DIR/bbroot/bin/busybox
  cp "kroot/boot/vmlinuz-$kv" vmlinuz
  "$busybox" depmod -b kroot "$kv"
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-packaging,python3-apt,openssh-server,nfs-common,netbase,iproute2,kmod,procps \
    bookworm rootfs "$mirror" > debootstrap.log 2>&1 || { tail -5 debootstrap.log >&2; die "debootstrap failed"; }
  rm -f rootfs/var/cache/apt/archives/*.deb
  # dltune's dependencies pre-installed in the venv the dltune role uses (natively, in a chroot): under
  # TCG, pip installing them takes minutes; the role then only adds the dltune wheel of the test run.
  if ls "$WHEELHOUSE"/*.whl >/dev/null 2>&1; then
    mkdir -p rootfs/tmp/wheelhouse && cp "$WHEELHOUSE"/*.whl rootfs/tmp/wheelhouse/
    chroot rootfs python3 -m venv /opt/dltune/venv
    chroot rootfs /opt/dltune/venv/bin/pip install -q --no-index --find-links /tmp/wheelhouse \
      $(cd "$WHEELHOUSE" && ls *.whl | grep -v '^dltune-' | sed 's/-.*//' | sort -u) ||
      die "cannot pre-install dltune's dependencies in the VM image"
    rm -rf rootfs/tmp/wheelhouse
  fi
  modules_closure rootfs kroot "$kv" virtio_pci virtio_net nfsv3 nfsv4
  chroot rootfs depmod "$kv"
  ssh-keygen -q -t ed25519 -N '' -f ssh/id_ed25519
  install -d -m 700 rootfs/root/.ssh
  install -m 600 ssh/id_ed25519.pub rootfs/root/.ssh/authorized_keys
  cat > rootfs/sbin/lab-init <<'INIT'
#!/bin/sh
# PID 1 of the lab VM: NICs in PCI order, eth0 management (QEMU user net), eth1 -> em1, eth2 -> em2.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmpfs /run; mkdir -p /dev/pts /run/sshd; mount -t devpts devpts /dev/pts; mount -o remount,rw /
mount -t tmpfs tmpfs /tmp
hostname gpu-node-vm; for m in virtio_net nfsv3 nfsv4; do modprobe $m; done
ip link set lo up; ip link set eth1 name em1; ip link set eth2 name em2
ip addr add 10.0.2.15/24 dev eth0; ip link set eth0 up; ip route add default via 10.0.2.2
ip addr add 10.21.115.122/24 dev em1; ip link set em1 up
ip addr add 10.21.115.123/24 dev em2; ip link set em2 up
/usr/sbin/sshd -E /var/log/sshd.log
echo "LAB-INIT: sshd up at $(cut -d' ' -f1 /proc/uptime)s" > /dev/console
while :; do sleep 3600; done
INIT
  chmod +x rootfs/sbin/lab-init
  mke2fs -q -t ext4 -d rootfs -L root rootfs.img 1536M
  systemd_variant
  mkdir -p initrd/bin initrd/proc initrd/sys initrd/dev initrd/newroot
  cp "$busybox" initrd/bin/
  modules_closure initrd kroot "$kv" virtio_pci virtio_blk crc32c_generic ext4
  "$busybox" depmod -b initrd "$kv"
  cat > initrd/init <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_blk crc32c_generic ext4; do modprobe $m; done
for i in $(seq 50); do [ -b /dev/vda ] && break; sleep 0.1; done
mount -t ext4 /dev/vda /newroot || { echo "LAB-INIT: root mount failed"; poweroff -f; }
init=/sbin/lab-init
for word in $(cat /proc/cmdline); do case $word in labinit=*) init=${word#labinit=} ;; esac; done
umount /proc /sys; mount --move /dev /newroot/dev
exec switch_root /newroot "$init"
INIT
  chmod +x initrd/init
  (cd initrd && find . | cpio -o -H newc --quiet | gzip -1) > initrd.gz
  rm -rf kroot kdeb bbroot rootfs initrd
  echo "$key" > built
  log "VM image built: kernel $kv"
}

# start [systemd]: the lab-init image (PID 1 a shell script, up in ~10 s), or the systemd variant
# (real boot, reboots inside the same QEMU: -snapshot keeps the session's changes across them).
start() {
  local variant=${1:-lab-init} image append reboot mgmt_mac=52:54:00:12:34:56
  [ -s "$VM_DIR/built" ] || die "no VM image: run $0 build"
  ip netns list | grep -q "^$NS_STORAGE" || die "the storage namespace is not up: run nfs-storage.sh up"
  stop >/dev/null 2>&1
  rm -f "$VM_DIR/console.log"
  if [ "$variant" = systemd ]; then
    image=$VM_DIR/rootfs-sd.img append="console=ttyS0 panic=-1 labinit=/lib/systemd/systemd" reboot=
  else
    image=$VM_DIR/rootfs.img append="console=ttyS0 panic=-1 quiet" reboot=-no-reboot
  fi
  # shellcheck disable=SC2086 # $reboot is one option or none
  ip netns exec "$NS_STORAGE" setsid qemu-system-x86_64 -accel tcg -cpu max -m 1536 -smp 2 -snapshot \
    -kernel "$VM_DIR/vmlinuz" -initrd "$VM_DIR/initrd.gz" -append "$append" \
    -drive "file=$image,format=raw,if=virtio" -display none $reboot -nodefaults \
    -serial "file:$VM_DIR/console.log" \
    -netdev "user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:$SSH_PORT-:22" -device virtio-net-pci,netdev=mgmt,mac=$mgmt_mac,romfile= \
    -netdev tap,id=n1,ifname=tapem1,script=no,downscript=no -device virtio-net-pci,netdev=n1,mac=52:54:00:00:01:01,romfile= \
    -netdev tap,id=n2,ifname=tapem2,script=no,downscript=no -device virtio-net-pci,netdev=n2,mac=52:54:00:00:01:02,romfile= \
    > "$VM_DIR/qemu.out" 2>&1 &
  echo $! > "$VM_DIR/qemu.pid"
  for _ in $(seq 1 600); do
    if [ "$variant" = systemd ]; then
      ip netns exec "$NS_STORAGE" ssh -n -q -i "$VM_DIR/ssh/id_ed25519" -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o ConnectTimeout=3 -p "$SSH_PORT" root@127.0.0.1 true 2>/dev/null &&
        { log "systemd VM up (ssh on 127.0.0.1:$SSH_PORT in $NS_STORAGE)"; return 0; }
    else
      grep -q 'LAB-INIT: sshd up' "$VM_DIR/console.log" 2>/dev/null && { log "VM up (ssh on 127.0.0.1:$SSH_PORT in $NS_STORAGE)"; return 0; }
    fi
    grep -q 'root mount failed' "$VM_DIR/console.log" 2>/dev/null && die "VM root mount failed"
    running || { cat "$VM_DIR/qemu.out" >&2; die "qemu exited"; }
    sleep 0.5
  done
  die "VM did not come up in 300 s"
}

# Whether the recorded QEMU runs: the same rule as tests/lab/nfsvm.py's vm_running() (the inventory's),
# so a PID reused by another process after a crash counts as no VM.
running() {
  local pid
  pid=$(cat "$VM_DIR/qemu.pid" 2>/dev/null) && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == qemu-system* ]]
}

stop() {
  [ -s "$VM_DIR/qemu.pid" ] || return 0
  local pid; pid=$(cat "$VM_DIR/qemu.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$VM_DIR/qemu.pid"
}


up() {
  build
  local ganesha=$LAB_STATE/nfs/ganesha.pid
  if ! { [ -s "$ganesha" ] && kill -0 "$(cat "$ganesha")" 2>/dev/null && ip netns list | grep -q "^$NS_STORAGE"; }; then
    stop
    bash "$LAB_DIR/nfs-storage.sh" up
  fi
  if running; then log "VM already up (ssh on 127.0.0.1:$SSH_PORT in $NS_STORAGE)"; else start lab-init; fi
  touch "$LAB_STATE/nfs-vm.up"
}

down() {
  stop
  bash "$LAB_DIR/nfs-storage.sh" down
  rm -f "$LAB_STATE/nfs-vm.up"
}

case ${1:-} in
  build) build ;;
  start) start "${2:-lab-init}" ;;
  stop) stop ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 build|start [systemd]|stop|up|down" >&2; exit 2 ;;
esac
