//! What a post or a poll on an engine shard's QP or CQ reads without the device's lock.
//!
//! With engine shards (`UROCE_SHARDS`, [`crate::shard`]) the packet work of a QP runs
//! under its shard's lock alone. The verbs that find the QP, the CQ or an address handle
//! from the program's pointer would still take the device's lock for that lookup, and
//! every post and poll of every thread would queue on it. [`Routes`] is the part of the
//! device's tables those lookups need, behind a reader-writer lock: the data path only
//! reads it (threads posting on different shards run side by side), and the verbs that
//! make and destroy QPs, CQs and address handles write it under the device's lock.
//!
//! Lock order: the device's lock, then [`Routes`]' (written with no shard's lock held);
//! [`Routes`]' read, then one shard's lock. A reader never takes the device's lock while
//! it holds the read.

#![deny(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use uroce::verbs::{CqId, Mr, Remote};

use crate::engine::QpEntry;

/// A CQ as a poll without the device's lock sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CqRoute {
    pub id: CqId,
    /// The engines whose QPs used it (bit `k` for engine `k`): only their copies may hold
    /// its completions. With bit 0 (a QP of the device's own engine) the device's copy
    /// may, and its polls take the device's lock.
    pub fed_by: u64,
}

impl CqRoute {
    /// Whether a QP of the device's own engine used it.
    pub fn on_zero(&self) -> bool {
        self.fed_by & 1 != 0
    }
}

/// The lookups of the data path on the shards, kept only while the device has shards.
#[derive(Default)]
pub(crate) struct Routes {
    /// QPs that live on shards 1 and up, by `ibv_qp` address.
    pub qps: HashMap<usize, QpEntry>,
    /// Every CQ, by `ibv_cq` address.
    pub cqs: HashMap<usize, CqRoute>,
    /// Address handles (by `ibv_ah` address) and where their datagrams go.
    pub ahs: HashMap<usize, Remote>,
    /// The inline staging region, once made: [`crate::post`]'s slot `k` is engine `k`'s,
    /// written under that engine's lock only.
    pub stage: Option<Mr>,
}

/// A device's [`Routes`], shared by its state and its threads.
#[derive(Clone, Default)]
pub(crate) struct RouteTable(Arc<RwLock<Routes>>);

impl RouteTable {
    /// The routes, for reading.
    pub fn read(&self) -> RwLockReadGuard<'_, Routes> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The routes, for a change (under the device's lock, no shard's held).
    pub fn write(&self) -> RwLockWriteGuard<'_, Routes> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}
