#!/usr/bin/env python3
# Usage: python3 tools/scripts/mkroutes.py COUNT SEED > routes.txt  (input for `--routes`)
import random, sys
# A BGP-like mix of 100,000 routes (seeded): mostly /24 and /16-/23, few short, 0.5% longer
# than /24; gateways alternate between the hosts behind the two ports; 10.0.0.0/15 avoided.
random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
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
