//! Held worker tables, the service's (`/v1/tenants/{tenant}/tables/{table}`): what a
//! router puts once, the deltas it sends as its workers change, and the answers.

use serde::{Deserialize, Serialize};

use crate::request::WorkerInputs;
use crate::wire::request::WorkerJson;

/// `PUT …/tables/{table}`: the whole table, replacing any before it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableJson {
    /// The workers: ids unique, each with `dp_size` ranks.
    pub workers: Vec<WorkerJson>,
    /// Per-worker inputs as columns, for the workers with any (the rest are zeros): the
    /// load a router tracks; overlaps are usually the request's.
    #[serde(default)]
    pub inputs: WorkerInputs,
}

/// `POST …/tables/{table}/deltas`: a change to the version `base_version`, applied as
/// `remove`, then `add`, then `inputs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDelta {
    /// The version this change was made against: the table's current one, or the delta is
    /// refused (`table-version`), so no change is applied out of order or twice.
    pub base_version: u64,
    /// Workers that left, by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<u64>,
    /// Workers that joined (their inputs start at zero).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<WorkerJson>,
    /// Rows to set: each column given replaces the held value of the rows listed.
    #[serde(default)]
    pub inputs: WorkerInputs,
}

/// The answer to a put or a delta: the table's new version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableVersion {
    /// The tenant.
    pub tenant: String,
    /// The table's name.
    pub table: String,
    /// The version now current: name it as the next delta's `base_version`, and in a
    /// selection's `table_version` to select from it alone.
    pub version: u64,
    /// Its workers.
    pub workers: usize,
    /// Its (worker, rank) slots.
    pub slots: usize,
}

/// `GET …/tables/{table}`: the current version, whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableState {
    /// The tenant.
    pub tenant: String,
    /// The table's name.
    pub table: String,
    /// The version.
    pub version: u64,
    /// The workers.
    pub workers: Vec<WorkerJson>,
    /// A row per slot, in slot order.
    pub inputs: WorkerInputs,
}
