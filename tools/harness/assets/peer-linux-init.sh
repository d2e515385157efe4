#!/bin/busybox sh
# /init of the Linux peer guest (`cargo xtask bench --peer linux`): a Debian kernel + busybox
# initramfs with the same two virtio-net ports (MACs 02:00:00:00:00:01/02) as Gannet.
#
# Kernel command line keys: peer_mode=l2 (bridge the two ports) | l3 (IPv4 forwarding);
# peer_sysctl=diff (with l3: the sysctls of the differential test, tests/src/differential.rs,
# which lists each one and why); peer_mtu1=N (with l3: port 1's MTU, `ip link set mtu N`; the
# differential test's small egress MTU).
# Console protocol (one command per line on ttyS0, no prompt, no echo):
#   st TAG   -> "PEERSTAT TAG <first line of /proc/stat>"
#   tl TAG   -> "PEERTL TAG <now ns> <idle_sleeptime ns> <iowait_sleeptime ns>" (/proc/timer_list:
#               ktime now and the nohz idle time, both exact, unlike /proc/stat's tick samples)
#   nd TAG   -> "PEERNETDEV TAG <rx/tx packets of both ports>"
#   quit     -> power off
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
echo 1 > /proc/sys/kernel/printk

for m in $(cat /modules.order); do
  insmod "/lib/modules/$m.ko" || echo "peer: insmod $m failed"
done

# Find the ports by their QEMU MAC (PCI probe order is not relied on).
P0=""; P1=""
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  for d in /sys/class/net/*; do
    case "$(cat "$d/address" 2>/dev/null)" in
      02:00:00:00:00:01) P0=${d##*/} ;;
      02:00:00:00:00:02) P1=${d##*/} ;;
    esac
  done
  [ -n "$P0" ] && [ -n "$P1" ] && break
  sleep 0.1
done
if [ -z "$P0" ] || [ -z "$P1" ]; then
  echo "peer: error: virtio-net ports not found ($(ls /sys/class/net))"
  poweroff -f
fi

MODE=l2
SYSCTL=""
MTU1=""
for kv in $(cat /proc/cmdline); do
  case "$kv" in
    peer_mode=*) MODE=${kv#peer_mode=} ;;
    peer_sysctl=*) SYSCTL=${kv#peer_sysctl=} ;;
    peer_mtu1=*) MTU1=${kv#peer_mtu1=} ;;
  esac
done

# Write one sysctl; a failure stops the boot with "peer: error" (the harness watches for it).
sysctl_w() {
  echo "$2" > "/proc/sys/$1" 2>/dev/null || { echo "peer: error: sysctl $1=$2 failed"; poweroff -f; }
}

ip link set lo up
case "$MODE" in
  l2)
    # The generator addresses its frames to the QEMU NIC MACs. A bridge delivers frames for its
    # ports' own MACs locally instead of forwarding them, so the ports take other MACs: the
    # generator's destination is then unknown unicast and is flooded to the other port.
    ip link set "$P0" address 02:00:00:00:01:01
    ip link set "$P1" address 02:00:00:00:01:02
    brctl addbr br0
    brctl stp br0 off
    brctl setfd br0 0
    brctl addif br0 "$P0"
    brctl addif br0 "$P1"
    ip link set "$P0" up
    ip link set "$P1" up
    ip link set br0 up
    ;;
  l3)
    ip addr add 10.0.0.1/24 dev "$P0"
    ip addr add 10.0.1.1/24 dev "$P1"
    ip link set "$P0" up
    if [ -n "$MTU1" ]; then
      ip link set dev "$P1" mtu "$MTU1" || { echo "peer: error: mtu $MTU1 on $P1 failed"; poweroff -f; }
    fi
    ip link set "$P1" up
    echo 1 > /proc/sys/net/ipv4/ip_forward
    arp -i "$P0" -s 10.0.0.2 02:00:00:00:0a:02
    arp -i "$P1" -s 10.0.1.2 02:00:00:00:0b:02
    if [ "$SYSCTL" = diff ]; then
      # Differential test (RFC 1812 behaviour, one crafted frame at a time); the reasons are in
      # tests/src/differential.rs (LINUX_SYSCTLS).
      sysctl_w net/ipv4/icmp_ratelimit 0
      sysctl_w net/ipv4/route/error_cost 0
      sysctl_w net/ipv4/icmp_errors_use_inbound_ifaddr 1
      for c in all default "$P0" "$P1"; do
        sysctl_w "net/ipv4/conf/$c/rp_filter" 0
        sysctl_w "net/ipv4/conf/$c/accept_source_route" 1
      done
    fi
    ;;
  *)
    echo "peer: error: unknown peer_mode=$MODE"
    poweroff -f
    ;;
esac

# Wait for carrier on both ports (virtio-net reports link up at once under QEMU).
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  [ "$(cat /sys/class/net/$P0/operstate)" = up ] && [ "$(cat /sys/class/net/$P1/operstate)" = up ] && break
  sleep 0.1
done
if [ "$MODE" = l2 ]; then
  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    [ "$(cat /sys/class/net/$P0/brport/state)" = 3 ] && [ "$(cat /sys/class/net/$P1/brport/state)" = 3 ] && break
    sleep 0.1
  done
fi

stty -echo 2>/dev/null
echo "peer: ready mode=$MODE sysctl=${SYSCTL:-default} ports=$P0,$P1 mtu=$(cat /sys/class/net/$P0/mtu),$(cat /sys/class/net/$P1/mtu) kernel=$(uname -r)"
while read -r cmd arg; do
  case "$cmd" in
    st) echo "PEERSTAT $arg $(head -n 1 /proc/stat)" ;;
    tl) awk -v t="$arg" '/^now at/ { n = $3 }
          /\.idle_sleeptime/ { s = $0; gsub(/[^0-9]/, "", s); i = s }
          /\.iowait_sleeptime/ { s = $0; gsub(/[^0-9]/, "", s); w = s }
          END { print "PEERTL " t " " n " " i " " w }' /proc/timer_list ;;
    nd) echo "PEERNETDEV $arg $(cat /sys/class/net/$P0/statistics/rx_packets) $(cat /sys/class/net/$P0/statistics/tx_packets) $(cat /sys/class/net/$P1/statistics/rx_packets) $(cat /sys/class/net/$P1/statistics/tx_packets) $(cat /sys/class/net/$P0/statistics/rx_dropped) $(cat /sys/class/net/$P1/statistics/tx_dropped)" ;;
    quit) poweroff -f ;;
    "") ;;
    *) echo "peer: unknown command $cmd" ;;
  esac
done
poweroff -f
