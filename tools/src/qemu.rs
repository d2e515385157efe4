//! QEMU: build the image, assemble the command line, boot and supervise the guest.
