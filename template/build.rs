//! Link the image with Gannet's linker script (`gannet.ld`, put on the link path by the
//! `unikernel` crate's build script): the kernel at 1 MiB, the PVH note, the boot sections.
fn main() {
    println!("cargo::rustc-link-arg-bins=-Tgannet.ld");
}
