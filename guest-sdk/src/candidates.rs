//! The candidate columns of one selection, borrowed.

use crate::InputGroups;

/// The candidates of one selection as columns (see the WIT record `candidates` for units).
///
/// Row i of every column describes the same candidate. Columns of groups the policy did
/// not declare are empty; the accessors of declared groups always have `len()` rows.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    worker_ids: &'a [u64],
    dp_ranks: &'a [u32],
    device_overlap_blocks: &'a [u32],
    host_overlap_blocks: &'a [u32],
    disk_overlap_blocks: &'a [u32],
    cached_tokens: &'a [u32],
    active_prefill_tokens: &'a [u32],
    decode_blocks: &'a [u32],
    active_requests: &'a [u32],
    preferred_multiplier: &'a [f64],
}

/// The columns given to [`Candidates::new`] do not line up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnLengthError {
    pub column: &'static str,
    pub expected: usize,
    pub found: usize,
}

impl std::fmt::Display for ColumnLengthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "column `{}` has {} rows, expected {} (or 0 if its group is not declared)",
            self.column, self.found, self.expected
        )
    }
}

impl std::error::Error for ColumnLengthError {}

/// The raw columns, in WIT order; used by the host and the guest glue to build a view.
#[derive(Debug, Default, Clone, Copy)]
pub struct Columns<'a> {
    pub worker_ids: &'a [u64],
    pub dp_ranks: &'a [u32],
    pub device_overlap_blocks: &'a [u32],
    pub host_overlap_blocks: &'a [u32],
    pub disk_overlap_blocks: &'a [u32],
    pub cached_tokens: &'a [u32],
    pub active_prefill_tokens: &'a [u32],
    pub decode_blocks: &'a [u32],
    pub active_requests: &'a [u32],
    pub preferred_multiplier: &'a [f64],
}

impl<'a> Candidates<'a> {
    /// Checks that every column of a group in `groups` has as many rows as `worker_ids`,
    /// and that the others are empty.
    pub fn new(columns: Columns<'a>, groups: InputGroups) -> Result<Self, ColumnLengthError> {
        let n = columns.worker_ids.len();
        let check = |column: &'static str, len: usize, group: InputGroups| {
            let expected = if groups.contains(group) { n } else { 0 };
            if len == expected || (len == n && !groups.contains(group)) {
                Ok(())
            } else {
                Err(ColumnLengthError { column, expected, found: len })
            }
        };
        check("dp-rank", columns.dp_ranks.len(), InputGroups::NONE)?;
        check("device-overlap-blocks", columns.device_overlap_blocks.len(), InputGroups::CACHE)?;
        check("host-overlap-blocks", columns.host_overlap_blocks.len(), InputGroups::CACHE)?;
        check("disk-overlap-blocks", columns.disk_overlap_blocks.len(), InputGroups::CACHE)?;
        check("cached-tokens", columns.cached_tokens.len(), InputGroups::CACHE)?;
        check("active-prefill-tokens", columns.active_prefill_tokens.len(), InputGroups::LOAD)?;
        check("decode-blocks", columns.decode_blocks.len(), InputGroups::LOAD)?;
        check("active-requests", columns.active_requests.len(), InputGroups::LOAD)?;
        check("preferred-multiplier", columns.preferred_multiplier.len(), InputGroups::AFFINITY)?;
        Ok(Self {
            worker_ids: columns.worker_ids,
            dp_ranks: columns.dp_ranks,
            device_overlap_blocks: columns.device_overlap_blocks,
            host_overlap_blocks: columns.host_overlap_blocks,
            disk_overlap_blocks: columns.disk_overlap_blocks,
            cached_tokens: columns.cached_tokens,
            active_prefill_tokens: columns.active_prefill_tokens,
            decode_blocks: columns.decode_blocks,
            active_requests: columns.active_requests,
            preferred_multiplier: columns.preferred_multiplier,
        })
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.worker_ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.worker_ids.is_empty()
    }
    /// Worker ids, ascending with `dp_ranks` as the second key.
    pub fn worker_ids(&self) -> &'a [u64] {
        self.worker_ids
    }
    /// Data-parallel ranks.
    pub fn dp_ranks(&self) -> &'a [u32] {
        self.dp_ranks
    }
    /// `cache`: prompt blocks cached in device memory, blocks.
    pub fn device_overlap_blocks(&self) -> &'a [u32] {
        self.device_overlap_blocks
    }
    /// `cache`: prompt blocks cached in host memory beyond the device tier, blocks.
    pub fn host_overlap_blocks(&self) -> &'a [u32] {
        self.host_overlap_blocks
    }
    /// `cache`: prompt blocks cached on disk beyond the host tier, blocks.
    pub fn disk_overlap_blocks(&self) -> &'a [u32] {
        self.disk_overlap_blocks
    }
    /// `cache`: prompt tokens servable from cache, tokens.
    pub fn cached_tokens(&self) -> &'a [u32] {
        self.cached_tokens
    }
    /// `load`: prompt tokens in flight in prefill, tokens.
    pub fn active_prefill_tokens(&self) -> &'a [u32] {
        self.active_prefill_tokens
    }
    /// `load`: decode blocks the candidate would hold with this request, blocks.
    pub fn decode_blocks(&self) -> &'a [u32] {
        self.decode_blocks
    }
    /// `load`: requests in flight.
    pub fn active_requests(&self) -> &'a [u32] {
        self.active_requests
    }
    /// `affinity`: preferred-taint multiplier, 1.0 where none applies.
    pub fn preferred_multiplier(&self) -> &'a [f64] {
        self.preferred_multiplier
    }
}
