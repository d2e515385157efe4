#!/bin/busybox sh
# /init of the DPDK peer guest (`cargo xtask bench --peer dpdk`): Debian's kernel + busybox +
# Debian's dpdk-testpmd and the libraries it links, with the same two ports (MACs
# 02:00:00:00:00:01/02) as Gannet, virtio-net, (`--nic e1000e`) Intel 82574L or (`--nic igb`)
# Intel 82576, both bound to uio_pci_generic (neither virtio_pci, e1000e nor igb is ever
# loaded).
#
# Kernel command line keys: dpdk_mode=io|mac (testpmd --forward-mode), hugepages=N (2 MiB
# pages for the EAL; read by the kernel itself).
# Once the ports are bound this script prints "peer: starting testpmd …" and execs nothing
# else: testpmd's interactive prompt owns the console (commands `start`, `show fwd stats all`,
# `stop`, `quit`; a line starting with `#` is a comment that testpmd only echoes). When testpmd
# exits the script prints "peer: testpmd exited with status N" and powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp /var/run /dev/hugepages
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/hugepages
mount -t hugetlbfs nodev /dev/hugepages || { echo "peer: error: cannot mount hugetlbfs"; poweroff -f; }
echo 1 > /proc/sys/kernel/printk
# The initramfs root is world-writable; the EAL refuses to run under such a /.
chmod 755 /

for m in $(cat /modules.order); do
  insmod "/lib/modules/$m.ko" || { echo "peer: error: insmod $m failed"; poweroff -f; }
done

# Both virtio-net functions (vendor 1af4, transitional device 1000), both 82574Ls (8086 10d3)
# or both 82576s (8086 10c9) go to uio_pci_generic.
echo 1af4 1000 > /sys/bus/pci/drivers/uio_pci_generic/new_id
echo 8086 10d3 > /sys/bus/pci/drivers/uio_pci_generic/new_id
echo 8086 10c9 > /sys/bus/pci/drivers/uio_pci_generic/new_id
N=0
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  N=$(ls /sys/bus/pci/drivers/uio_pci_generic | grep -c '^0000:')
  [ "$N" -ge 2 ] && break
  sleep 0.1
done
if [ "$N" -lt 2 ]; then
  echo "peer: error: $N virtio-net, e1000e or igb device(s) bound to uio_pci_generic, want 2 ($(ls /sys/bus/pci/devices))"
  poweroff -f
fi
HP=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages 2>/dev/null)
if [ -z "$HP" ] || [ "$HP" -eq 0 ]; then
  echo "peer: error: no 2 MiB hugepages (hugepages= on the kernel command line)"
  poweroff -f
fi

MODE=io
for kv in $(cat /proc/cmdline); do
  case "$kv" in
    dpdk_mode=*) MODE=${kv#dpdk_mode=} ;;
  esac
done
case "$MODE" in
  io|mac) ;;
  *) echo "peer: error: unknown dpdk_mode=$MODE"; poweroff -f ;;
esac

stty -echo 2>/dev/null
export LD_LIBRARY_PATH=/lib
echo "peer: starting testpmd mode=$MODE hugepages=$HP devices=$(ls /sys/bus/pci/drivers/uio_pci_generic | grep '^0000:' | tr '\n' ' ')kernel=$(uname -r)"
# Both lcores on CPU 0 (-smp 1: an SMP guest hangs booting under -icount); the main lcore
# reads the console, lcore 1 forwards. PMDs: only those in /pmd (-d). --no-lsc-interrupt: an
# 82574L's link comes up ~0.5 s after `start`, and testpmd would print its "link state change
# event" into the console mid-answer (the harness reads answers between prompt echoes).
/bin/dpdk-testpmd --lcores 0@0,1@0 -d /pmd --no-telemetry -- -i --no-lsc-interrupt \
  --forward-mode="$MODE" --burst=32 --record-core-cycles --record-burst-stats \
  --total-num-mbufs=8192 --eth-peer=0,02:00:00:00:0a:02 --eth-peer=1,02:00:00:00:0b:02
echo "peer: testpmd exited with status $?"
poweroff -f
