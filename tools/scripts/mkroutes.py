#!/usr/bin/env python3
# Usage: python3 tools/scripts/mkroutes.py COUNT SEED [--v6 [GATEWAY]] > routes.txt  (input for
# `--routes`, or a router's routes file)
import ipaddress, random, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
v6 = "--v6" in sys.argv
random.seed(int(args[1]) if len(args) > 1 else 1)
n = int(args[0]) if args else 100000
if v6:
    # The global IPv6 table's prefix-length mix, as netstack::router::fib6::synth (Huston's
    # "BGP in 20xx" shape: /48 the majority, then /32, /44, /40, /36, a few /29, /64 and /56),
    # per thousand; prefixes under 1,024 /20 blocks of 2000::/3, three in four longer ones under
    # the last /32 drawn, never inside 2001:db8::/32 (the ports' prefixes). All via GATEWAY
    # (default 2001:db8:1::2, the host behind port 1 in the README's IPv6 example).
    gw = args[2] if len(args) > 2 else "2001:db8:1::2"
    mix = [48]*540 + [32]*130 + [44]*100 + [40]*70 + [36]*50 + [29]*30 + [64]*60 + [56]*20
    blocks = [(random.getrandbits(17)) for _ in range(1024)]
    last32 = None; seen = set(); out = []
    while len(out) < n:
        l = random.choice(mix)
        r = random.getrandbits(128)
        if l > 32 and last32 is not None and random.randrange(4):
            a = last32 | (r & ((1 << 96) - 1))
        else:
            a = (1 << 125) | (random.choice(blocks) << 108) | (r & ((1 << 108) - 1))
        a &= ((1 << 128) - 1) ^ ((1 << (128 - l)) - 1)
        if a >> 96 == 0x20010db8 or (a, l) in seen:
            continue
        if l == 32:
            last32 = a
        seen.add((a, l))
        out.append(f"{ipaddress.IPv6Address(a)}/{l},{gw}")
    print("\n".join(out))
    sys.exit(0)
# A BGP-like mix of 100,000 routes (seeded): mostly /24 and /16-/23, few short, 0.5% longer
# than /24; gateways alternate between the hosts behind the two ports; 10.0.0.0/15 avoided.
lens = [24]*550 + [23]*150 + [22]*100 + [21]*40 + [20]*30 + [19]*15 + [18]*10 + [17]*5 + [16]*90 + [12]*4 + [8]*1 + [28]*5
seen = set(); out = []
while len(out) < n:
    l = random.choice(lens)
    a = random.getrandbits(32) & (0xffffffff << (32 - l)) & 0xffffffff
    if (a >> 24) in (0, 10, 127) or (a >> 28) >= 14 or (a, l) in seen:
        continue
    seen.add((a, l))
    gw = "10.0.1.2" if len(out) % 2 else "10.0.0.2"
    out.append(f"{a>>24}.{(a>>16)&255}.{(a>>8)&255}.{a&255}/{l},{gw}")
print("\n".join(out))
