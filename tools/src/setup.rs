//! Install missing prerequisites (the bare-metal target, QEMU).
