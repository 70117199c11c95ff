//! Workers' capacities a host knows and Dynamo 1.6.1's plugin context does not carry.

use std::sync::Arc;

/// A worker's capacity as its host advertises it (Dynamo's catalog: `total_kv_blocks`,
/// `max_num_batched_tokens`), for the `worker-capacity` and `candidate-capacities` imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerCapacity {
    /// The worker.
    pub worker_id: u64,
    /// Its KV cache, blocks.
    pub total_kv_blocks: u64,
    /// Its batch, tokens, if advertised.
    pub max_num_batched_tokens: Option<u64>,
}

/// A host that knows its workers' capacities, which Dynamo 1.6.1's plugin context does not
/// carry: Dynamo's selection service keeps them in its worker catalog. A picker asks when
/// its partition's rows change (a worker joins, leaves or changes ranks), not per selection,
/// so a capacity changed by re-registering with the same ranks is seen at the next change.
pub trait Capacities: Send + Sync {
    /// The capacities of the workers of partition (`model_name`, `routing_group`); a worker
    /// not listed has none known.
    fn capacities(&self, model_name: &str, routing_group: &str) -> Vec<WorkerCapacity>;
}

/// A host's source of its workers' capacities, for one partition's pickers.
#[derive(Clone)]
pub(crate) struct PartitionCapacities {
    pub(crate) source: Arc<dyn Capacities>,
    pub(crate) model_name: String,
    pub(crate) routing_group: String,
}
