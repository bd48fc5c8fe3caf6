//! Links the cdylib as Debian 12's libibverbs.so.1 is linked: soname `libibverbs.so.1`,
//! the version nodes of `abi/libibverbs.map`, and a `libibverbs.so.1` symbolic link
//! next to `libibverbs.so` in the target directory (drop_in_link.rs says how and why).

#[path = "drop_in_link.rs"]
mod drop_in_link;

fn main() {
    println!("cargo:rerun-if-changed=drop_in_link.rs");
    drop_in_link::drop_in("abi/libibverbs.map", "libibverbs.so.1", "libibverbs.so");
}
