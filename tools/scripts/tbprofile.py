#!/usr/bin/env python3
"""Which kernel functions TCG translated (or executed) during boot, from a QEMU debug log.

Boot time under TCG is mostly the translation of first-executed code (about 0.6 us per guest
instruction translated on the machines here: docs/benchmarks-journal.md, "Boot time, fifth pass"). This
maps the guest addresses of a `-d in_asm` (translated blocks) or `-d exec,nochain` (every
executed block) log to the image's functions and counts them up to the first block of
`--stop` (default: the phase report printed just before `gannet: ready`).

    qemu-system-x86_64 ... -kernel IMAGE -d in_asm -D /tmp/in_asm.log        # then kill it
    python3 tools/scripts/tbprofile.py IMAGE /tmp/in_asm.log
    qemu-system-x86_64 ... -kernel IMAGE -d exec,nochain -D /tmp/exec.log    # large: ~200 MB
    python3 tools/scripts/tbprofile.py --exec IMAGE /tmp/exec.log

Take the QEMU command line from `cargo xtask boot` (a wrapper named qemu-system-x86_64 early
in PATH can print it). Kernel addresses are 1 MiB up to 16 MiB; firmware blocks are ignored.

`--weigh` counts guest instructions executed, not blocks, from one log of both
(`-d in_asm,exec,nochain`: each executed block weighed by the instructions TCG translated for
it), per function, and with `--annotate REGEX` per instruction of the matching functions, each
with its inline chain from `addr2line -i` (file:line < caller's file:line ...). `--per N`
divides every count (e.g. by the frames forwarded). For the datapath benchmark, log only the
kernel's text (`-dfilter`, else the simulated device's byte copies make the log ~15 GB), and
count from the first `Bench::step` to the teardown:

    qemu-system-x86_64 <bench sim's command line> -append "mode=l2 sim=32 sim_size=9018 sim_iters=64" \
        -d in_asm,exec,nochain -dfilter 0x100000..0x138fff,<Bench::step's address>+<size> -D /tmp/ex.log
    python3 tools/scripts/tbprofile.py --weigh --start gannet::simbench::Bench::step \
        --stop mm::page_pool::PagePool::destroy --skip gannet::simbench::Bench::step \
        --per 10240 --annotate forward_burst_chains IMAGE /tmp/ex.log

(`sim_iters=64` after the 256 warm-up iterations of 32 frames: 10,240 frames. The figure
includes the warm-up and the work between brackets, so it is a little above `bench sim`'s.)
"""

import argparse
import bisect
import collections
import re
import subprocess

KERNEL = range(0x100000, 0x1000000)
# `-d exec` lines: "Trace N: 0xHOST [CS_BASE/PC/FLAGS/...]".
TRACE = re.compile(r"Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")


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
    ap.add_argument("--weigh", action="store_true",
                    help="the log is `-d in_asm,exec,nochain`: count instructions executed")
    ap.add_argument("--skip", default=None,
                    help="with --weigh: leave out the blocks of the function with this prefix")
    ap.add_argument("--per", type=float, default=1.0,
                    help="with --weigh: divide the counts by this (e.g. frames forwarded)")
    ap.add_argument("--annotate", default=None,
                    help="with --weigh: per-instruction counts of the functions matching this "
                         "regular expression, with their inline chains")
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
    if args.weigh:
        weigh(args, fn)
        return
    if args.exec:
        for line in open(args.log, errors="replace"):
            m = TRACE.match(line)
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


def weigh(args, fn):
    """`--weigh`: instructions executed per function (and per instruction with --annotate)."""
    insn = re.compile(r"0x([0-9a-f]+):\s+(?:[0-9a-f]{2} )+\s*(.*)")
    tb = {}      # block start -> its instructions' addresses (the latest translation)
    text = {}    # address -> disassembly
    count = collections.Counter()
    cur = None
    started = args.start is None
    for line in open(args.log, errors="replace"):
        if line.startswith("IN:"):
            cur = None
            continue
        m = insn.match(line)
        if m:
            a = int(m.group(1), 16)
            text[a] = m.group(2).strip()
            if cur is None:
                cur = tb[a] = []
            cur.append(a)
            continue
        m = TRACE.match(line)
        if not m:
            continue
        pc = int(m.group(1), 16)
        f = fn(pc)
        if not started:
            started = f.startswith(args.start)
            continue
        if f.startswith(args.stop):
            break
        if args.skip and f.startswith(args.skip):
            continue
        for a in tb.get(pc, ()):
            count[a] += 1
    per_fn = collections.Counter()
    for a, n in count.items():
        per_fn[fn(a)] += n
    print(f"guest instructions executed: {sum(count.values()) / args.per:.2f}"
          f"{' per ' + str(args.per) if args.per != 1 else ''}")
    for f, n in per_fn.most_common(args.top):
        print(f"{n / args.per:10.2f}  {f[:140]}")
    if not args.annotate:
        return
    pat = re.compile(args.annotate)
    addrs = sorted(a for a in count if pat.search(fn(a)))
    out = subprocess.run(["addr2line", "-a", "-i", "-e", args.image] + [hex(a) for a in addrs],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    chain = {}
    at = None
    for line in out:
        if line.startswith("0x"):
            at = int(line, 16)
            chain[at] = []
        elif at is not None:
            chain[at].append(line.split(" ")[0].rsplit("/", 1)[-1])
    for a in addrs:
        print(f"{a:x} {count[a] / args.per:8.2f}  {text.get(a, '')[:44]:44s} "
              f"{' < '.join(chain.get(a, []))[:120]}")


if __name__ == "__main__":
    main()
