#!/bin/sh
# make-fake-gpu-sysfs.sh DIR DEVICE[:SUBSYS[:CLASS]] ...
# A synthetic sysfs with NVIDIA PCI devices, for UBUNTU_DRIVERS_SYS_DIR=DIR (ubuntu-drivers-common's own
# tests use the same seam) and the nvidia_driver role's GPU count. No GPU exists in the lab: this is
# the lowest boundary where one can be faked. ubuntu-drivers reads DIR/devices/**/modalias; the role
# reads DIR/bus/pci/devices/*/{vendor,class}. CLASS defaults to 030200 (3D controller, datacenter GPUs);
# 068000 is an NVSwitch. Examples: 20b0:1450 (A100 SXM4 40GB), 2330:16c1 (H100 SXM5), 102d:106c (K80).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 DIR DEVICE[:SUBSYS[:CLASS]] ..." >&2; exit 2; }
dir=$1; shift
mkdir -p "$dir/bus/pci/devices"
slot_number=4
for spec in "$@"; do
    device=$(echo "$spec" | cut -d: -f1 | tr A-F a-f)
    subsys=$(echo "$spec:" | cut -d: -f2 | tr A-F a-f); subsys=${subsys:-0000}
    class=$(echo "$spec::" | cut -d: -f3); class=${class:-030200}
    slot=$(printf '0000:00:%02x.0' "$slot_number"); slot_number=$((slot_number + 1))
    node="$dir/devices/pci0000:00/$slot"
    mkdir -p "$node"
    upper_device=$(echo "$device" | tr a-f A-F); upper_subsys=$(echo "$subsys" | tr a-f A-F)
    base_class=$(echo "$class" | cut -c1-2 | tr a-f A-F); sub_class=$(echo "$class" | cut -c3-4 | tr a-f A-F)
    modalias="pci:v000010DEd0000${upper_device}sv000010DEsd0000${upper_subsys}bc${base_class}sc${sub_class}i00"
    echo 0x10de > "$node/vendor"
    echo "0x$device" > "$node/device"
    echo 0x10de > "$node/subsystem_vendor"
    echo "0x$subsys" > "$node/subsystem_device"
    echo "0x$class" > "$node/class"
    echo "$modalias" > "$node/modalias"
    printf 'PCI_CLASS=%s\nPCI_ID=10DE:%s\nPCI_SUBSYS_ID=10DE:%s\nPCI_SLOT_NAME=%s\nMODALIAS=%s\n' \
        "$class" "$upper_device" "$upper_subsys" "$slot" "$modalias" > "$node/uevent"
    ln -sfn "../../../devices/pci0000:00/$slot" "$dir/bus/pci/devices/$slot"
done
