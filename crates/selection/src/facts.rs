//! The facts a policy fetches lazily through imports (prefix hashes, policy class,
//! capacities): one implementation for native policies and guests' imports, so the two
//! see exactly the same data.

use std::borrow::Cow;

use switchyard_guest_sdk::{Capacity, Facts};

use crate::columns::ColumnBuffers;
use crate::request::SelectionRequest;
use crate::workers::WorkerTable;

/// The lazily fetched facts for one call: what both a native policy and a guest's
/// imports read, so the two see exactly the same data.
pub struct HostFacts<'a> {
    request: &'a SelectionRequest,
    table: &'a WorkerTable,
    candidate_ids: &'a [u64],
}

impl<'a> HostFacts<'a> {
    /// The facts of `request` for a call over `columns`.
    pub fn new(request: &'a SelectionRequest, table: &'a WorkerTable, columns: &'a ColumnBuffers) -> Self {
        Self { request, table, candidate_ids: columns.worker_ids() }
    }
}

impl Facts for HostFacts<'_> {
    fn prefix_hashes(&self) -> Option<Cow<'_, [u64]>> {
        self.request.prefix_hashes().map(Cow::Borrowed)
    }
    fn policy_class(&self) -> Option<Cow<'_, str>> {
        self.request.policy_class().map(Cow::Borrowed)
    }
    fn worker_capacity(&self, worker_id: u64) -> Option<Capacity> {
        self.table.worker(worker_id).and_then(|w| w.capacity())
    }
    fn candidate_capacities(&self) -> Cow<'_, [Option<Capacity>]> {
        Cow::Owned(self.candidate_ids.iter().map(|&id| self.worker_capacity(id)).collect())
    }
}
