//! uroce: a software RoCEv2 / InfiniBand transport stack in user space.
//!
//! This crate is the IO half. The sans-IO core, everything that takes packets and time in
//! and gives datagrams out without a system call, is the `uroce-proto` crate (as quinn's
//! `quinn-proto` is to `quinn`); its modules are re-exported here under the same names, so
//! `uroce::wire`, `uroce::verbs` and the rest are the paths a program uses.
//!
//! Layers (see `DESIGN.md`): [`wire`] formats and the ICRC, [`transport`] the RC, UC and UD
//! state machines around one QP shell, [`congestion`] DCQCN, [`mem`] protection domains
//! and memory regions, [`endpoint`] the sans-IO device context (packets and time in,
//! datagrams out), [`verbs`] the façade a program uses under ibverbs' names, [`cm`] the
//! connection manager (IBTA chapter 12, sans-IO: CM MADs in and out of QP 1), [`pcap`]
//! capture files, [`rng`] the seeded generator, [`sim`] deterministic simulated links: all
//! from `uroce-proto`. This crate's own: [`datapath`] the backends that put datagrams on a
//! network, [`net`] what the host knows (addresses, routes, neighbours, over rtnetlink).
//! The `uroce` command line lives in the `uroce-tools` crate.
//!
//! `unsafe` lives in [`datapath`] and [`net`] (the kernel's interfaces), and in `mem`'s
//! `shared.rs` with [`endpoint::Context::reg_mr_raw`] (the program's memory registered in
//! place and shared with it, its contract stated there); every other module forbids it.

pub use uroce_proto::{cm, congestion, endpoint, mem, pcap, rng, sim, transport, verbs, wire};

pub mod datapath;
#[doc(hidden)]
pub mod fuzzing;
pub mod net;

#[cfg(test)]
mod tests {
    /// The core writes Linux's errno numbers out rather than take `libc`: they are `libc`'s.
    #[test]
    fn core_errnos_are_libcs() {
        use uroce_proto::transport::errno;
        assert_eq!(errno::ENOMEM, libc::ENOMEM);
        assert_eq!(errno::EFAULT, libc::EFAULT);
        assert_eq!(errno::EBUSY, libc::EBUSY);
        assert_eq!(errno::EINVAL, libc::EINVAL);
    }
}
