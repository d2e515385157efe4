#!/usr/bin/env python3
"""Which kernel functions TCG translated (or executed) during boot, from a QEMU debug log.

Boot time under TCG is mostly the translation of first-executed code (about 0.6 us per guest
instruction translated on the machines here: BENCHMARKS.md, "Boot time, fifth pass"). This
maps the guest addresses of a `-d in_asm` (translated blocks) or `-d exec,nochain` (every
executed block) log to the image's functions and counts them up to the first block of
`--stop` (default: the phase report printed just before `gannet: ready`).

    qemu-system-x86_64 ... -kernel IMAGE -d in_asm -D /tmp/in_asm.log        # then kill it
    python3 tools/scripts/tbprofile.py IMAGE /tmp/in_asm.log
    qemu-system-x86_64 ... -kernel IMAGE -d exec,nochain -D /tmp/exec.log    # large: ~200 MB
    python3 tools/scripts/tbprofile.py --exec IMAGE /tmp/exec.log

Take the QEMU command line from `cargo xtask boot` (a wrapper named qemu-system-x86_64 early
in PATH can print it). Kernel addresses are 1 MiB up to 16 MiB; firmware blocks are ignored.
"""

import argparse
import bisect
import collections
import re
import subprocess

KERNEL = range(0x100000, 0x1000000)


def symbols(image):
    """(start, size, demangled name) of every text symbol, sorted by address."""
    out = subprocess.run(["nm", "-n", "-C", "-S", image], capture_output=True, text=True,
                         check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[2] in "tTwW":
            syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    return syms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image")
    ap.add_argument("log")
    ap.add_argument("--exec", action="store_true",
                    help="the log is `-d exec,nochain`: count executions, not translations")
    ap.add_argument("--stop", default="gannet::arch::phases::report",
                    help="stop at the first block of the function with this prefix")
    ap.add_argument("--start", default=None,
                    help="count only from the first block of the function with this prefix "
                         "(e.g. gannet::run::build_core for the cores phase)")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()

    syms = symbols(args.image)
    starts = [s[0] for s in syms]
    cache = {}

    def fn(addr):
        if addr not in cache:
            i = bisect.bisect_right(starts, addr) - 1
            ok = i >= 0 and syms[i][0] <= addr < syms[i][0] + max(syms[i][1], 1)
            cache[addr] = syms[i][2] if ok else "?"
        return cache[addr]

    blocks = collections.Counter()
    insns = collections.Counter()
    pages = set()
    started = args.start is None
    if args.exec:
        trace = re.compile(r"Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
        for line in open(args.log, errors="replace"):
            m = trace.match(line)
            if not m or int(m.group(1), 16) not in KERNEL:
                continue
            f = fn(int(m.group(1), 16))
            if f.startswith(args.stop):
                break
            if not started:
                started = f.startswith(args.start)
                if not started:
                    continue
            blocks[f] += 1
        print(f"kernel blocks executed before {args.stop}: {sum(blocks.values())}")
        for f, n in blocks.most_common(args.top):
            print(f"{n:9d}  {f[:140]}")
        return

    insn = re.compile(r"0x([0-9a-f]+):\s+(?:[0-9a-f]{2} )+")
    first = True
    done = False
    for line in open(args.log, errors="replace"):
        if line.startswith("IN:"):
            first = True
            continue
        m = insn.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        if addr not in KERNEL:
            continue
        f = fn(addr)
        if first:
            if f.startswith(args.stop):
                done = True
                break
            first = False
            if not started:
                started = f.startswith(args.start)
            if started:
                blocks[f] += 1
        if not started:
            continue
        insns[f] += 1
        pages.add(addr >> 12)
    if not done:
        print(f"note: no block of {args.stop} in the log (counted the whole log)")
    print(f"kernel TBs translated: {sum(blocks.values())}, guest instructions translated: "
          f"{sum(insns.values())}, code pages: {len(pages)}")
    print("   TBs  instrs  function")
    for f, n in blocks.most_common(args.top):
        print(f"{n:6d} {insns[f]:7d}  {f[:140]}")


if __name__ == "__main__":
    main()
