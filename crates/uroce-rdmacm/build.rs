//! Links the cdylib as Debian 12's librdmacm.so.1 is linked: soname `librdmacm.so.1`, the
//! version nodes RDMACM_1.0 … RDMACM_1.3 of `abi/librdmacm.map`, and a `librdmacm.so.1`
//! symbolic link next to `librdmacm.so` in the target directory. The technique (the
//! nodes in the version script, each name bound to its node by `.symver` in the object)
//! is uroce-verbs' and so is the code: crates/uroce-verbs/drop_in_link.rs.

#[path = "../uroce-verbs/drop_in_link.rs"]
mod drop_in_link;

fn main() {
    println!("cargo:rerun-if-changed=../uroce-verbs/drop_in_link.rs");
    drop_in_link::drop_in("abi/librdmacm.map", "librdmacm.so.1", "librdmacm.so");
}
