//! The decoder logic on hand-assembled x86-64 (bytes as `objdump -M intel` shows them).

use super::*;

const F: u64 = 0x1000;
const TABLE: u64 = 0x2000;

/// `cmp eax, 2; ja +N; jmp qword ptr [rax*8 + 0x2000]`, then three `ret`s at 0x100b, 0x100c,
/// 0x100d (the targets), and where `ja` goes.
fn guarded_table() -> Vec<u8> {
    let mut c = vec![0x83, 0xf8, 0x02]; // cmp eax, 2
    c.extend([0x77, 0x07]); // ja 0x100c (past the jmp)
    c.extend([0xff, 0x24, 0xc5, 0x00, 0x20, 0x00, 0x00]); // jmp [rax*8+0x2000]
    c.extend([0xc3, 0xc3, 0xc3]); // 0x100c.. targets
    c
}

fn table(entries: &[u64]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_le_bytes()).collect()
}

#[test]
fn indirect_calls_through_register_and_memory() {
    // call rax; call qword ptr [rip+0x10]; call 0x1010 (direct); ret
    let code = [
        0xff, 0xd0, 0xff, 0x15, 0x10, 0x00, 0x00, 0x00, 0xe8, 0x03, 0x00, 0x00, 0x00, 0xc3,
    ];
    let r = analyze("f", "f", F, &code, &Memory::default());
    assert_eq!(r.instructions, 4);
    assert_eq!(r.direct_calls, 1);
    assert_eq!(r.indirect_calls, 2);
    let at: Vec<(u64, &Offense)> = r.findings.iter().map(|f| (f.at, &f.offense)).collect();
    assert_eq!(
        at,
        [
            (0x1000, &Offense::IndirectCall),
            (0x1002, &Offense::IndirectCall)
        ]
    );
    assert_eq!(r.findings[0].text, "call rax");
    assert_eq!(
        r.findings[1].text,
        "call qword ptr [rip+0x10] [through the pointer at 0x1018]"
    );
}

#[test]
fn guarded_table_inside_passes() {
    let code = guarded_table();
    let t = table(&[0x100c, 0x100d, 0x100e]);
    let mem = Memory::new(vec![(F, &code), (TABLE, &t)]);
    let r = analyze("f", "f", F, &code, &mem);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(
        r.tables,
        [JumpTable {
            at: 0x1005,
            table: TABLE,
            entries: 3,
            bound: Bound::Exact(3)
        }]
    );
}

#[test]
fn guarded_table_entry_outside_fails() {
    let code = guarded_table();
    // Entry 2 points past the function's end (0x100f).
    let t = table(&[0x100c, 0x100d, 0x5000]);
    let mem = Memory::new(vec![(F, &code), (TABLE, &t)]);
    let r = analyze("f", "f", F, &code, &mem);
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].at, 0x1005);
    assert_eq!(
        r.findings[0].offense,
        Offense::OutsideTarget {
            entry: 2,
            target: Some(0x5000)
        }
    );
    // A target inside the range that is not an instruction start fails too.
    let t = table(&[0x100c, 0x1006, 0x100e]);
    let mem = Memory::new(vec![(F, &code), (TABLE, &t)]);
    let r = analyze("f", "f", F, &code, &mem);
    assert_eq!(
        r.findings[0].offense,
        Offense::OutsideTarget {
            entry: 1,
            target: Some(0x1006)
        }
    );
}

#[test]
fn byte_index_table_ends_at_first_outside_entry() {
    // movzx eax, al; jmp qword ptr [rax*8+0x2000]; ret; ret
    let mut code = vec![0x0f, 0xb6, 0xc0];
    code.extend([0xff, 0x24, 0xc5, 0x00, 0x20, 0x00, 0x00]);
    code.extend([0xc3, 0xc3]);
    // Two entries of this function, then another function's table.
    let t = table(&[0x100a, 0x100b, 0x9000, 0x9001]);
    let mem = Memory::new(vec![(F, &code), (TABLE, &t)]);
    let r = analyze("f", "f", F, &code, &mem);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.tables[0].entries, 2);
    assert_eq!(r.tables[0].bound, Bound::Byte);
    // Its first entry outside: fails.
    let t = table(&[0x9000, 0x100a]);
    let mem = Memory::new(vec![(F, &code), (TABLE, &t)]);
    let r = analyze("f", "f", F, &code, &mem);
    assert_eq!(
        r.findings[0].offense,
        Offense::OutsideTarget {
            entry: 0,
            target: Some(0x9000)
        }
    );
}

#[test]
fn unbounded_table_and_plain_register_jump_fail() {
    // mov eax, [rdi]; jmp qword ptr [rax*8+0x2000]
    let code = [0x8b, 0x07, 0xff, 0x24, 0xc5, 0x00, 0x20, 0x00, 0x00];
    let r = analyze("f", "f", F, &code, &Memory::default());
    assert_eq!(r.findings[0].offense, Offense::Unbounded);
    // mov rax, [rdi+8]; jmp rax (a tail call through a pointer)
    let code = [0x48, 0x8b, 0x47, 0x08, 0xff, 0xe0];
    let r = analyze("f", "f", F, &code, &Memory::default());
    assert_eq!(r.indirect_jumps, 1);
    assert_eq!(r.findings[0].offense, Offense::IndirectJump);
    assert_eq!(r.findings[0].at, 0x1004);
}

#[test]
fn relative_table_inside_passes() {
    // cmp eax, 1; ja +0x10; lea rcx, [rip+0xff0] (= 0x2000 - 0x1010 + ...); movsxd rax,
    // dword ptr [rcx+rax*4]; add rax, rcx; jmp rax; ret; ret
    let mut code = vec![0x83, 0xf8, 0x01, 0x77, 0x10];
    // lea at 0x1005, 7 bytes, next ip 0x100c: disp = 0x2000 - 0x100c
    let disp = (TABLE - 0x100c) as u32;
    code.extend([0x48, 0x8d, 0x0d]);
    code.extend(disp.to_le_bytes());
    code.extend([0x48, 0x63, 0x04, 0x81]); // movsxd rax, [rcx+rax*4]
    code.extend([0x48, 0x01, 0xc8]); // add rax, rcx
    code.extend([0xff, 0xe0]); // jmp rax at 0x1013
    code.extend([0xc3, 0xc3]); // 0x1015, 0x1016
    let rel = |t: u64| ((t as i64) - (TABLE as i64)) as i32;
    let t: Vec<u8> = [rel(0x1015), rel(0x1016)]
        .iter()
        .flat_map(|e| e.to_le_bytes())
        .collect();
    let mem = Memory::new(vec![(F, &code), (TABLE, &t)]);
    let r = analyze("f", "f", F, &code, &mem);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.tables[0].at, 0x1013);
    assert_eq!(r.tables[0].entries, 2);
    assert_eq!(r.tables[0].bound, Bound::Exact(2));
}

#[test]
fn names_match_by_suffix_and_owner() {
    let l2 = "unikernel::dataplane::nf::builtin_impl::<impl unikernel::dataplane::percore::Core<P>>::poll_l2";
    assert_eq!(matches(l2, LOOP_FUNCTIONS).map(|l| l.name), Some("poll_l2"));
    let run =
        "drivers::virtio_net::forward::<impl drivers::virtio_net::VirtioNet<H,T>>::forward_run";
    assert_eq!(
        matches(run, LOOP_FUNCTIONS).map(|l| l.name),
        Some("forward_run")
    );
    // Same last segment, another type: not ours; a longer name: not ours.
    assert!(matches("netstack::router::Router<H,_,_,F>::poll_l2", LOOP_FUNCTIONS).is_none());
    assert!(matches(&format!("{run}_x"), LOOP_FUNCTIONS).is_none());
}
