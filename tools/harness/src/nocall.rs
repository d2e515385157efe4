//! "No indirect call per packet" (issue 33, item 2): disassembles the per-frame loop functions
//! of a kernel image and fails on any indirect `call` and on any indirect `jmp` that is not a
//! jump table into the same function.
//!
//! The network-function API promises that `NetworkFunction::process` is monomorphised and
//! inlined into the driver's fused RX→TX loop: no `dyn`, no function pointer per frame
//! (NetBricks' and Capsule's boxed closures paid one). This module checks the promise on the
//! machine code, where a stray `dyn` (or a `log!` through `log::LOGGER`'s `&dyn Log`) shows.
//!
//! - [`LOOP_FUNCTIONS`] names the functions, by the end of their demangled path and the type
//!   they belong to; every monomorphised copy in the image is checked.
//! - [`check_image`] reads the ELF (`object`): symbols, their address ranges and the bytes of
//!   the sections they point into; [`analyze`] decodes one function (`iced-x86`, a linear sweep
//!   from its symbol's address over its symbol's size) and classifies every control transfer.
//! - [`Report::text`] prints per function its address range and counts, and every offending
//!   instruction with its address and function; [`Report::ok`] is the verdict.
//!
//! Run by `cargo xtask nocall` (and `cargo xtask lint`, step `nocall`) on the stock image, and
//! by `tests/tests/nocall.rs` on the stock image and on the negative control
//! ([`crate::qemu::build_nf_control_image`], cargo feature `unikernel/nf-indirect-control`: a
//! type-erased NF run through `Core::poll_nf`), which it must fail.
//!
//! # Jump tables
//!
//! An indirect `jmp` passes only as one of LLVM's two switch-table shapes:
//!
//! - absolute (non-PIC, the kernel's code model): `jmp qword ptr [idx*8 + TABLE]`, 8-byte
//!   entries that are target addresses;
//! - relative (PIC): `lea base, [rip + TABLE]`, `movsxd r, dword ptr [base + idx*4]`,
//!   `add r, base`, `jmp r` (adjacent, as LLVM emits them), 4-byte entries relative to `TABLE`.
//!
//! Every entry the index can select must be an instruction start inside the same function. The
//! table's length is bounded by what the code before the jump establishes about the index,
//! found by walking back in straight-line order from the jump (at most [`WALK_BACK`]
//! instructions, stopping at an unconditional transfer), following `mov` copies of the index:
//!
//! - a guard `cmp idx, N-1` + `ja`/`jbe` (or `cmp idx, N` + `jae`/`jb`): exactly `N` entries,
//!   each of which must be inside the function, else the jump fails;
//! - a mask `and idx, N-1`: exactly `N` entries, likewise;
//! - a zero-extended byte (`movzx idx, r8/m8`: LLVM dropped the guard because the index is an
//!   enum whose range it knows): at most 256 entries, and the table is taken to end at the first
//!   entry that is not an instruction start of the function (what follows is the next datum in
//!   `.rodata`, such as another function's table); the first entry must be one.
//!
//! A table jump with none of these bounds fails as unverifiable. This is a lint on the code
//! LLVM emits, not a proof: the guard is the nearest one in straight-line order.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter, Instruction, IntelFormatter, Mnemonic, OpKind,
    Register,
};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

/// One per-frame loop function, found by its demangled name (hash left out).
#[derive(Debug, Clone, Copy)]
pub struct LoopFn {
    /// The last segment of the path: the name ends with `::{name}`.
    pub name: &'static str,
    /// A fragment the whole demangled path must contain (the type or module it belongs to),
    /// so that another crate's function of the same name is not taken for it.
    pub owner: &'static str,
    /// Whether the stock image must have it (`false`: inlined into a caller in the list, or
    /// only in some images, as `poll_nf` for an NF run on its own); a required one missing
    /// fails the check, so that a rename cannot make it check nothing.
    pub required: bool,
}

/// The per-frame loop functions, the ones that run once per frame or per burst in the fused
/// RX→TX loops of every mode: the check's one list.
///
/// - `Core<P>::poll_l2`, `poll_route`, `poll_nf`: a poll iteration of l2/io, the router, and
///   an NF of the public API (`poll_nf` is only in an image that calls it: the stock l2/io
///   inline its body into `poll_l2`);
/// - the virtio driver's fused loops `forward_run` (inlined into `forward_run_general`),
///   `forward_run_general`, `forward_run_chains` (inlined into `forward_rest` and
///   `forward_burst_chains`), `forward_rest`, `forward_burst_chains`, `forward_run_big`;
/// - `drivers::nic::staged::forward_staged`, the loop between two different drivers (in an
///   image that pairs two: the stock kernel's virtio-net + e1000e pair, `setup::mixed`; the
///   DD-bit driver has its own loop for a pair of its type).
pub const LOOP_FUNCTIONS: &[LoopFn] = &[
    LoopFn {
        name: "poll_l2",
        owner: "Core<P>",
        required: true,
    },
    LoopFn {
        name: "poll_route",
        owner: "Core<P>",
        required: true,
    },
    LoopFn {
        name: "poll_route_after",
        owner: "Core<P>",
        required: true,
    },
    LoopFn {
        name: "poll_nf",
        owner: "Core<P>",
        required: false,
    },
    LoopFn {
        name: "forward_run",
        owner: "VirtioNet<H,T>",
        required: false,
    },
    LoopFn {
        name: "forward_run_general",
        owner: "VirtioNet<H,T>",
        required: true,
    },
    LoopFn {
        name: "forward_run_chains",
        owner: "VirtioNet<H,T>",
        required: false,
    },
    LoopFn {
        name: "forward_rest",
        owner: "VirtioNet<H,T>",
        required: true,
    },
    LoopFn {
        name: "forward_burst_chains",
        owner: "VirtioNet<H,T>",
        required: true,
    },
    LoopFn {
        name: "forward_run_big",
        owner: "VirtioNet<H,T>",
        required: true,
    },
    LoopFn {
        name: "forward_staged",
        owner: "drivers::nic::staged",
        required: false,
    },
];

/// How far back (instructions) the bound of a table's index is looked for.
pub const WALK_BACK: usize = 32;

/// A guard or mask above this many entries is not believed (the jump fails as unverifiable).
pub const MAX_TABLE: u64 = 1024;

/// What bounds a jump table's index (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `cmp` + unsigned branch, or `and` with a mask: exactly this many entries.
    Exact(u64),
    /// A zero-extended byte: at most 256 entries, the table ending at its first entry that is
    /// not an instruction start of the function.
    Byte,
}

/// One jump table that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JumpTable {
    /// Address of the `jmp`.
    pub at: u64,
    /// Address of the table.
    pub table: u64,
    /// Entries read (all inside the function).
    pub entries: usize,
    /// What bounded them.
    pub bound: Bound,
}

/// Why an instruction fails the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offense {
    /// `call` through a register or memory.
    IndirectCall,
    /// `jmp` through a register or memory that is not a jump table.
    IndirectJump,
    /// A jump table whose index has no bound the check can see.
    Unbounded,
    /// A jump table entry (index `entry`) whose target is not an instruction start of the
    /// function (`None`: the entry could not be read from the image).
    OutsideTarget {
        /// The entry's index in the table.
        entry: u64,
        /// Its target.
        target: Option<u64>,
    },
    /// Bytes that do not decode as an instruction.
    Undecodable,
}

/// One offending instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Its address.
    pub at: u64,
    /// The instruction, Intel syntax (with the symbol of a RIP-relative operand, if known).
    pub text: String,
    /// Why it fails.
    pub offense: Offense,
}

/// One function's analysis.
#[derive(Debug, Clone, Default)]
pub struct FnReport {
    /// The [`LoopFn::name`] it was found by.
    pub short: &'static str,
    /// Its demangled name (hash left out).
    pub name: String,
    /// Its address range `[start, end)`.
    pub start: u64,
    /// End of the range (exclusive).
    pub end: u64,
    /// Instructions decoded.
    pub instructions: usize,
    /// Direct `call`s.
    pub direct_calls: usize,
    /// Indirect `call`s (each one also a finding).
    pub indirect_calls: usize,
    /// Indirect `jmp`s, tables included.
    pub indirect_jumps: usize,
    /// The jump tables that passed.
    pub tables: Vec<JumpTable>,
    /// The offending instructions.
    pub findings: Vec<Finding>,
}

/// Bytes at addresses (the image's allocated sections), and the symbols to name addresses.
#[derive(Debug, Default)]
pub struct Memory<'a> {
    parts: Vec<(u64, &'a [u8])>,
    symbols: BTreeMap<u64, (u64, String)>,
}

impl<'a> Memory<'a> {
    /// Memory made of `(address, bytes)` parts.
    pub fn new(parts: Vec<(u64, &'a [u8])>) -> Self {
        Self {
            parts,
            symbols: BTreeMap::new(),
        }
    }

    /// `len` bytes at `addr`, if one part holds them all.
    pub fn read(&self, addr: u64, len: usize) -> Option<&'a [u8]> {
        self.parts.iter().find_map(|&(base, bytes)| {
            let off = usize::try_from(addr.checked_sub(base)?).ok()?;
            bytes.get(off..off.checked_add(len)?)
        })
    }

    /// Names `addr` as `name` or `name+0xOFF` after the symbol holding it, if any.
    pub fn name_of(&self, addr: u64) -> Option<String> {
        let (&start, (_, name)) = self
            .symbols
            .range(..=addr)
            .rev()
            .take(16)
            .find(|(&a, (size, _))| addr < a + (*size).max(1))?;
        Some(if addr == start {
            name.clone()
        } else {
            format!("{name}+{:#x}", addr - start)
        })
    }

    /// Adds a symbol (the larger one wins at an address).
    pub fn add_symbol(&mut self, addr: u64, size: u64, name: String) {
        let e = self.symbols.entry(addr).or_insert((size, name.clone()));
        if size > e.0 {
            *e = (size, name);
        }
    }

    /// The 8-byte value at `addr` (a pointer slot, such as a GOT entry).
    fn slot(&self, addr: u64) -> Option<u64> {
        self.read(addr, 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}

/// What an indirect `call`/`jmp` `ins[k]` goes to, when the image says: a RIP-relative slot
/// (or a register last loaded from one) and the function its value names. For the report only:
/// such a call (LLVM's libcalls through the GOT, `memcpy`, `memset`) is still an indirect call.
fn describe_target(ins: &[Instruction], k: usize, mem: &Memory<'_>) -> String {
    let i = &ins[k];
    let slot = if i.op0_kind() == OpKind::Memory && i.is_ip_rel_memory_operand() {
        Some(i.ip_rel_memory_address())
    } else if i.op0_kind() == OpKind::Register {
        let r = i.op0_register().full_register();
        ins[..k]
            .iter()
            .rev()
            .find(|w| w.op0_kind() == OpKind::Register && w.op0_register().full_register() == r)
            .filter(|w| w.mnemonic() == Mnemonic::Mov && w.is_ip_rel_memory_operand())
            .map(|w| w.ip_rel_memory_address())
    } else {
        None
    };
    let Some(slot) = slot else {
        return String::new();
    };
    let value = mem.slot(slot);
    let target = value.and_then(|v| mem.name_of(v));
    match (value, target) {
        (Some(v), Some(t)) => format!(" [through the pointer at {slot:#x}: {v:#x} = {t}]"),
        (Some(v), None) => format!(" [through the pointer at {slot:#x}: {v:#x}]"),
        _ => format!(" [through the pointer at {slot:#x}]"),
    }
}

/// Decodes `code` (a function at `start`) and classifies its control transfers; `short` and
/// `name` label the report, `mem` serves the jump tables.
pub fn analyze(
    short: &'static str,
    name: &str,
    start: u64,
    code: &[u8],
    mem: &Memory<'_>,
) -> FnReport {
    let end = start + code.len() as u64;
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut ins: Vec<Instruction> = Vec::new();
    while decoder.can_decode() {
        ins.push(decoder.decode());
    }
    let starts: Vec<u64> = ins.iter().map(|i| i.ip()).collect();
    let is_start = |t: u64| starts.binary_search(&t).is_ok();
    let mut r = FnReport {
        short,
        name: name.to_string(),
        start,
        end,
        instructions: ins.len(),
        ..FnReport::default()
    };
    let mut fmt = IntelFormatter::new();
    fmt.options_mut().set_hex_prefix("0x");
    fmt.options_mut().set_hex_suffix("");
    fmt.options_mut().set_rip_relative_addresses(true);
    let mut text = |k: usize| {
        let mut s = String::new();
        fmt.format(&ins[k], &mut s);
        s + &describe_target(&ins, k, mem)
    };
    for (k, i) in ins.iter().enumerate() {
        let finding = |offense| Finding {
            at: i.ip(),
            text: String::new(),
            offense,
        };
        match i.flow_control() {
            _ if i.is_invalid() => r.findings.push(finding(Offense::Undecodable)),
            FlowControl::Call => r.direct_calls += 1,
            FlowControl::IndirectCall => {
                r.indirect_calls += 1;
                r.findings.push(finding(Offense::IndirectCall));
            }
            FlowControl::IndirectBranch => {
                r.indirect_jumps += 1;
                let Some((shape, table, index, first)) = table_shape(&ins, k) else {
                    r.findings.push(finding(Offense::IndirectJump));
                    continue;
                };
                let Some(bound) = index_bound(&ins[..first], index) else {
                    r.findings.push(finding(Offense::Unbounded));
                    continue;
                };
                match read_table(mem, shape, table, bound, &|t| {
                    (start..end).contains(&t) && is_start(t)
                }) {
                    Ok(entries) => r.tables.push(JumpTable {
                        at: i.ip(),
                        table,
                        entries,
                        bound,
                    }),
                    Err((entry, target)) => r
                        .findings
                        .push(finding(Offense::OutsideTarget { entry, target })),
                }
            }
            _ => {}
        }
    }
    for f in &mut r.findings {
        if let Ok(k) = starts.binary_search(&f.at) {
            f.text = text(k);
        }
    }
    r
}

/// A table's entry format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// 8-byte target addresses.
    Absolute,
    /// 4-byte signed offsets from the table's address.
    Relative,
}

/// The jump table behind the indirect `jmp` `ins[k]`: its shape, address, index register and
/// the first instruction of the pattern (where the walk back for the bound starts).
fn table_shape(ins: &[Instruction], k: usize) -> Option<(Shape, u64, Register, usize)> {
    let j = &ins[k];
    if j.op0_kind() == OpKind::Memory {
        let absolute = j.memory_base() == Register::None
            && j.memory_index() != Register::None
            && j.memory_index_scale() == 8;
        return absolute.then(|| {
            (
                Shape::Absolute,
                j.memory_displacement64(),
                j.memory_index(),
                k,
            )
        });
    }
    if j.op0_kind() != OpKind::Register || k < 3 {
        return None;
    }
    let target = j.op0_register().full_register();
    let (add, load) = (&ins[k - 1], &ins[k - 2]);
    let regs = |i: &Instruction| {
        (i.op0_kind() == OpKind::Register && i.op1_kind() == OpKind::Register).then(|| {
            (
                i.op0_register().full_register(),
                i.op1_register().full_register(),
            )
        })
    };
    let (sum, other) = regs(add).filter(|_| add.mnemonic() == Mnemonic::Add)?;
    if sum != target {
        return None;
    }
    // `movsxd X, dword ptr [B + I*4]` with {X, B} = {sum, other}.
    let ok_load = load.mnemonic() == Mnemonic::Movsxd
        && load.op1_kind() == OpKind::Memory
        && load.memory_index_scale() == 4
        && load.memory_displacement64() == 0
        && load.memory_index() != Register::None;
    if !ok_load {
        return None;
    }
    let (x, base) = (
        load.op0_register().full_register(),
        load.memory_base().full_register(),
    );
    if !((x == sum && base == other) || (x == other && base == sum)) {
        return None;
    }
    // The nearest earlier write of `base` must be `lea base, [rip + TABLE]`.
    let lea =
        ins[..k - 2].iter().rev().take(WALK_BACK).find(|i| {
            i.op0_kind() == OpKind::Register && i.op0_register().full_register() == base
        })?;
    (lea.mnemonic() == Mnemonic::Lea && lea.is_ip_rel_memory_operand()).then(|| {
        (
            Shape::Relative,
            lea.ip_rel_memory_address(),
            load.memory_index(),
            k - 2,
        )
    })
}

/// The bound on `index` established by the instructions before a table jump (`before` ends
/// right before the pattern), walking back (see the [module documentation](self)).
fn index_bound(before: &[Instruction], index: Register) -> Option<Bound> {
    let mut reg = index.full_register();
    let n = before.len();
    for (j, i) in before.iter().enumerate().rev().take(WALK_BACK) {
        match i.flow_control() {
            FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Return
            | FlowControl::Exception => return None,
            _ => {}
        }
        let writes_reg =
            i.op0_kind() == OpKind::Register && i.op0_register().full_register() == reg;
        if !writes_reg {
            continue;
        }
        let imm = || -> Option<u64> {
            matches!(
                i.op1_kind(),
                OpKind::Immediate8
                    | OpKind::Immediate8to32
                    | OpKind::Immediate8to64
                    | OpKind::Immediate32
                    | OpKind::Immediate32to64
            )
            .then(|| i.immediate(1))
        };
        let exact = |n: u64| (1..=MAX_TABLE).contains(&n).then_some(Bound::Exact(n));
        match i.mnemonic() {
            Mnemonic::Cmp => {
                let c = imm()?;
                let next = (j + 1 < n).then(|| before[j + 1].mnemonic());
                return match next? {
                    Mnemonic::Ja | Mnemonic::Jbe => exact(c.checked_add(1)?),
                    Mnemonic::Jae | Mnemonic::Jb => exact(c),
                    _ => None,
                };
            }
            Mnemonic::Test | Mnemonic::Bt => continue,
            Mnemonic::And => return exact(imm()?.checked_add(1)?),
            Mnemonic::Movzx => {
                let byte = match i.op1_kind() {
                    OpKind::Register => i.op1_register().size() == 1,
                    OpKind::Memory => i.memory_size().size() == 1,
                    _ => false,
                };
                return byte.then_some(Bound::Byte);
            }
            Mnemonic::Mov if i.op1_kind() == OpKind::Register => {
                reg = i.op1_register().full_register();
            }
            _ => return None,
        }
    }
    None
}

/// Reads the table's entries under `bound`; `inside` says whether a target is an instruction
/// start of the function. `Ok(entries read)`, or `Err((entry, target))` for the first bad one.
fn read_table(
    mem: &Memory<'_>,
    shape: Shape,
    table: u64,
    bound: Bound,
    inside: &dyn Fn(u64) -> bool,
) -> std::result::Result<usize, (u64, Option<u64>)> {
    let max = match bound {
        Bound::Exact(n) => n,
        Bound::Byte => 256,
    };
    for e in 0..max {
        let target = match shape {
            Shape::Absolute => mem
                .read(table + 8 * e, 8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
            Shape::Relative => mem.read(table + 4 * e, 4).map(|b| {
                let off = i32::from_le_bytes(b.try_into().expect("4 bytes"));
                table.wrapping_add_signed(i64::from(off))
            }),
        };
        match target {
            Some(t) if inside(t) => {}
            // The end of a byte-bounded table (never before its first entry).
            _ if bound == Bound::Byte && e > 0 => return Ok(e as usize),
            t => return Err((e, t)),
        }
    }
    Ok(max as usize)
}

/// The check's result for one image.
#[derive(Debug, Default)]
pub struct Report {
    /// Every function checked, by address.
    pub functions: Vec<FnReport>,
    /// The required [`LoopFn`]s not found.
    pub missing: Vec<&'static str>,
    /// The optional ones not found (inlined, or not in this image).
    pub absent: Vec<&'static str>,
}

impl Report {
    /// No finding and no required function missing.
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.functions.iter().all(|f| f.findings.is_empty())
    }

    /// Every finding, with its function.
    pub fn findings(&self) -> impl Iterator<Item = (&FnReport, &Finding)> {
        self.functions
            .iter()
            .flat_map(|f| f.findings.iter().map(move |x| (f, x)))
    }

    /// One line per function (range, counts, tables, verdict), one per finding, the missing
    /// and absent functions and a closing verdict line.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for f in &self.functions {
            let entries: usize = f.tables.iter().map(|t| t.entries).sum();
            let _ = writeln!(
                s,
                "nocall: {} [{:#x}, {:#x}) {} B, {} instructions, {} direct calls, {} indirect \
                 calls, {} indirect jmps ({} jump tables, {} entries, all inside): {}  {}",
                f.short,
                f.start,
                f.end,
                f.end - f.start,
                f.instructions,
                f.direct_calls,
                f.indirect_calls,
                f.indirect_jumps,
                f.tables.len(),
                entries,
                if f.findings.is_empty() { "ok" } else { "FAIL" },
                f.name
            );
            for t in &f.tables {
                let bound = match t.bound {
                    Bound::Exact(n) => format!("index < {n} (guard or mask)"),
                    Bound::Byte => "index a byte; table ends at the first outside entry".into(),
                };
                let _ = writeln!(
                    s,
                    "nocall:     jump table at {:#x}: jmp at {:#x}, {} entries, {bound}",
                    t.table, t.at, t.entries
                );
            }
        }
        for (f, x) in self.findings() {
            let why = match &x.offense {
                Offense::IndirectCall => "indirect call".to_string(),
                Offense::IndirectJump => "indirect jmp that is not a jump table".to_string(),
                Offense::Unbounded => "jump table with no bound on its index".to_string(),
                Offense::OutsideTarget { entry, target } => match target {
                    Some(t) => format!("jump table entry {entry} -> {t:#x}, outside the function"),
                    None => format!("jump table entry {entry} not in the image"),
                },
                Offense::Undecodable => "bytes that do not decode".to_string(),
            };
            let _ = writeln!(
                s,
                "nocall: OFFENDING {:#x} in {} ({}): {why}: {}",
                x.at, f.name, f.short, x.text
            );
        }
        for m in &self.missing {
            let _ = writeln!(
                s,
                "nocall: MISSING: no function `{m}` in the image (renamed? update \
                 harness::nocall::LOOP_FUNCTIONS)"
            );
        }
        if !self.absent.is_empty() {
            let _ = writeln!(
                s,
                "nocall: not in this image (inlined or unused): {}",
                self.absent.join(", ")
            );
        }
        let n = self.findings().count();
        let _ = writeln!(
            s,
            "nocall: {}: {} functions, {} offending instructions, {} required missing",
            if self.ok() { "ok" } else { "FAILED" },
            self.functions.len(),
            n,
            self.missing.len()
        );
        s
    }
}

/// Which [`LoopFn`] a demangled name (hash left out) is, if any.
pub fn matches<'a>(name: &str, list: &'a [LoopFn]) -> Option<&'a LoopFn> {
    list.iter().find(|l| {
        name.strip_suffix(l.name)
            .is_some_and(|rest| rest.ends_with("::"))
            && name.contains(l.owner)
    })
}

/// Checks the functions `list` of the ELF image at `path`.
pub fn check_image(path: &Path, list: &[LoopFn]) -> Result<Report> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("parsing {} as an object file", path.display()))?;
    let mut parts = Vec::new();
    for s in file.sections() {
        if s.address() == 0 {
            continue;
        }
        let bytes = s
            .data()
            .with_context(|| format!("reading section {:?}", s.name()))?;
        if !bytes.is_empty() {
            parts.push((s.address(), bytes));
        }
    }
    let mut mem = Memory::new(parts);
    let mut found: BTreeMap<u64, (&'static str, String, u64)> = BTreeMap::new();
    for sym in file.symbols() {
        let Ok(raw) = sym.name() else { continue };
        let name = format!("{:#}", rustc_demangle::demangle(raw));
        if sym.address() != 0 && !name.is_empty() && sym.kind() != SymbolKind::Section {
            mem.add_symbol(sym.address(), sym.size(), name.clone());
        }
        if sym.kind() != SymbolKind::Text || sym.size() == 0 {
            continue;
        }
        if let Some(l) = matches(&name, list) {
            found.insert(sym.address(), (l.name, name, sym.size()));
        }
    }
    if found.is_empty() && file.symbols().next().is_none() {
        bail!("{} has no symbol table (stripped?)", path.display());
    }
    let mut report = Report::default();
    for (&addr, (short, name, size)) in &found {
        let len = usize::try_from(*size).context("function size")?;
        let code = mem
            .read(addr, len)
            .with_context(|| format!("{name} at {addr:#x}: bytes not in any section"))?;
        report
            .functions
            .push(analyze(short, name, addr, code, &mem));
    }
    for l in list {
        if !found.values().any(|(s, _, _)| *s == l.name) {
            if l.required {
                report.missing.push(l.name);
            } else {
                report.absent.push(l.name);
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
