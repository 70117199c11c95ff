//! The candidate columns of one selection, borrowed.

use crate::InputGroups;

/// The u32 columns, in the order they travel packed in the WIT record `candidates`
/// (`columns`), each with the group that brings it.
///
/// The one definition of the column set besides the WIT: the host's per-worker inputs
/// (`WorkerInputs`), the request JSON, the packing and the SDK's test `Case` all index
/// arrays by it, so a new column is a new variant here (with its group and name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Column {
    /// The candidate's data-parallel rank (always present).
    DpRank,
    /// `cache`: prompt blocks cached in device memory, blocks.
    DeviceOverlapBlocks,
    /// `cache`: prompt blocks cached in host memory beyond the device tier, blocks.
    HostOverlapBlocks,
    /// `cache`: prompt blocks cached on disk beyond the host tier, blocks.
    DiskOverlapBlocks,
    /// `cache`: prompt tokens servable from cache, tokens.
    CachedTokens,
    /// `load`: prompt tokens in flight in prefill, tokens.
    ActivePrefillTokens,
    /// `load`: decode blocks the candidate would hold with this request, blocks.
    DecodeBlocks,
    /// `load`: requests in flight.
    ActiveRequests,
}

impl Column {
    /// How many there are: the length of every array indexed by a column.
    pub const COUNT: usize = 8;

    /// Every u32 column, in wire order (`ALL[c as usize] == c`).
    pub const ALL: [Column; Column::COUNT] = [
        Column::DpRank,
        Column::DeviceOverlapBlocks,
        Column::HostOverlapBlocks,
        Column::DiskOverlapBlocks,
        Column::CachedTokens,
        Column::ActivePrefillTokens,
        Column::DecodeBlocks,
        Column::ActiveRequests,
    ];

    /// The group that brings this column (`NONE`: always present).
    pub const fn group(self) -> InputGroups {
        match self {
            Column::DpRank => InputGroups::NONE,
            Column::DeviceOverlapBlocks
            | Column::HostOverlapBlocks
            | Column::DiskOverlapBlocks
            | Column::CachedTokens => InputGroups::CACHE,
            Column::ActivePrefillTokens | Column::DecodeBlocks | Column::ActiveRequests => InputGroups::LOAD,
        }
    }

    /// The column's WIT name.
    pub const fn name(self) -> &'static str {
        match self {
            Column::DpRank => "dp-rank",
            Column::DeviceOverlapBlocks => "device-overlap-blocks",
            Column::HostOverlapBlocks => "host-overlap-blocks",
            Column::DiskOverlapBlocks => "disk-overlap-blocks",
            Column::CachedTokens => "cached-tokens",
            Column::ActivePrefillTokens => "active-prefill-tokens",
            Column::DecodeBlocks => "decode-blocks",
            Column::ActiveRequests => "active-requests",
        }
    }

    /// The column's name in JSON and Rust: the WIT name in snake case (`cached_tokens`).
    pub fn snake_name(self) -> String {
        self.name().replace('-', "_")
    }

    /// The column whose [`Column::snake_name`] or WIT name is `name`.
    pub fn from_name(name: &str) -> Option<Column> {
        Column::ALL.into_iter().find(|c| c.name() == name || c.snake_name() == name)
    }

    /// The columns that travel when `groups` are declared, in wire order.
    pub fn present(groups: InputGroups) -> impl Iterator<Item = Column> {
        Column::ALL.into_iter().filter(move |c| groups.contains(c.group()))
    }
}

/// The candidates of one selection as columns (see the WIT record `candidates` for units).
///
/// Row i of every column describes the same candidate. Columns of groups the policy did
/// not declare are empty; the accessors of declared groups always have `len()` rows.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    worker_ids: &'a [u64],
    /// Indexed by `Column as usize`; empty where the group is not declared.
    columns: [&'a [u32]; Column::COUNT],
    preferred_multiplier: Option<&'a [f64]>,
}

/// The columns given to [`Candidates::new`] do not line up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnLengthError {
    /// The column (its WIT name) whose length is wrong.
    pub column: &'static str,
    /// The entries it should have.
    pub expected: usize,
    /// The entries it has.
    pub found: usize,
}

impl std::fmt::Display for ColumnLengthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` has {} entries, expected {}", self.column, self.found, self.expected)
    }
}

impl std::error::Error for ColumnLengthError {}

/// The raw columns as they cross the boundary (the WIT record `candidates`); used by the
/// host and the guest glue to build a view.
#[derive(Debug, Default, Clone, Copy)]
pub struct Columns<'a> {
    /// One per candidate.
    pub worker_ids: &'a [u64],
    /// The u32 columns of the declared groups, one after another ([`Column::present`]).
    pub packed: &'a [u32],
    /// One per candidate, or empty when no preference applies.
    pub preferred_multiplier: &'a [f64],
}

/// The group bits that decide the packed list's layout (`affinity` travels apart).
const PACKED_GROUPS: u8 = InputGroups::CACHE.bits() | InputGroups::LOAD.bits();
/// A column's slot in [`PackedLayout`] when its group is not declared.
const ABSENT: u8 = u8::MAX;

/// Where each column lies in the packed list for one set of declared groups.
struct PackedLayout {
    /// Indexed by `Column as usize`: the column's position in the list, in columns, or
    /// [`ABSENT`]; every position is below `present`.
    slots: [u8; Column::COUNT],
    /// How many columns the list holds.
    present: usize,
}

/// The layout for every combination of `cache` and `load` (indexed by their bits),
/// derived at compile time from [`Column::group`] and wire order: the columns
/// [`Column::present`] walks, in its order.
const PACKED_LAYOUTS: [PackedLayout; 4] = {
    const EMPTY: PackedLayout = PackedLayout { slots: [ABSENT; Column::COUNT], present: 0 };
    let mut layouts = [EMPTY; 4];
    let mut bits = 0;
    while bits < layouts.len() {
        let groups = InputGroups::from_bits_truncate(bits as u8);
        let mut c = 0;
        while c < Column::COUNT {
            if groups.contains(Column::ALL[c].group()) {
                layouts[bits].slots[c] = layouts[bits].present as u8;
                layouts[bits].present += 1;
            }
            c += 1;
        }
        bits += 1;
    }
    layouts
};

impl<'a> Candidates<'a> {
    /// Checks that `packed` holds exactly the columns of `groups`, one row per worker id,
    /// and that the multipliers are one per row or none.
    pub fn new(columns: Columns<'a>, groups: InputGroups) -> Result<Self, ColumnLengthError> {
        let n = columns.worker_ids.len();
        let layout = &PACKED_LAYOUTS[usize::from(groups.bits() & PACKED_GROUPS)];
        if columns.packed.len() != n * layout.present {
            return Err(ColumnLengthError {
                column: "columns",
                expected: n * layout.present,
                found: columns.packed.len(),
            });
        }
        // Straight-line per column, from a table: a guest builds this view on every call,
        // and a filtered walk over `Column::present` is a measurable share of an empty
        // call's instructions (callgrind, `benches/profile.rs empty`).
        let mut sliced: [&'a [u32]; Column::COUNT] = [&[]; Column::COUNT];
        for (column, &slot) in sliced.iter_mut().zip(&layout.slots) {
            if slot != ABSENT {
                let start = usize::from(slot) * n;
                *column = &columns.packed[start..start + n];
            }
        }
        Self::with_multipliers(columns.worker_ids, sliced, columns.preferred_multiplier, groups)
    }

    /// The same view from columns that lie apart (a host that reads its callers' buffers
    /// in place): `columns` indexed by `Column as usize`, each column of `groups` one row
    /// per worker id; the others are ignored. Multipliers are one per row or none.
    pub fn from_columns(
        worker_ids: &'a [u64],
        columns: [&'a [u32]; Column::COUNT],
        preferred_multiplier: &'a [f64],
        groups: InputGroups,
    ) -> Result<Self, ColumnLengthError> {
        let n = worker_ids.len();
        let mut kept: [&'a [u32]; Column::COUNT] = [&[]; Column::COUNT];
        for column in Column::present(groups) {
            let rows = columns[column as usize];
            if rows.len() != n {
                return Err(ColumnLengthError { column: column.name(), expected: n, found: rows.len() });
            }
            kept[column as usize] = rows;
        }
        Self::with_multipliers(worker_ids, kept, preferred_multiplier, groups)
    }

    /// The view, once its columns are known to line up: checks the multipliers.
    fn with_multipliers(
        worker_ids: &'a [u64],
        columns: [&'a [u32]; Column::COUNT],
        preferred_multiplier: &'a [f64],
        groups: InputGroups,
    ) -> Result<Self, ColumnLengthError> {
        let (n, m) = (worker_ids.len(), preferred_multiplier.len());
        if m != 0 && (m != n || !groups.contains(InputGroups::AFFINITY)) {
            let expected = if groups.contains(InputGroups::AFFINITY) { n } else { 0 };
            return Err(ColumnLengthError { column: "preferred-multiplier", expected, found: m });
        }
        Ok(Self { worker_ids, columns, preferred_multiplier: (m != 0).then_some(preferred_multiplier) })
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.worker_ids.len()
    }
    /// Whether there are no candidates.
    pub fn is_empty(&self) -> bool {
        self.worker_ids.is_empty()
    }
    /// Worker ids, ascending with `dp_ranks` as the second key.
    pub fn worker_ids(&self) -> &'a [u64] {
        self.worker_ids
    }
    /// Any u32 column by name; empty if its group is not declared.
    pub fn column(&self, column: Column) -> &'a [u32] {
        self.columns[column as usize]
    }
    /// Data-parallel ranks.
    pub fn dp_ranks(&self) -> &'a [u32] {
        self.column(Column::DpRank)
    }
    /// `cache`: prompt blocks cached in device memory, blocks.
    pub fn device_overlap_blocks(&self) -> &'a [u32] {
        self.column(Column::DeviceOverlapBlocks)
    }
    /// `cache`: prompt blocks cached in host memory beyond the device tier, blocks.
    pub fn host_overlap_blocks(&self) -> &'a [u32] {
        self.column(Column::HostOverlapBlocks)
    }
    /// `cache`: prompt blocks cached on disk beyond the host tier, blocks.
    pub fn disk_overlap_blocks(&self) -> &'a [u32] {
        self.column(Column::DiskOverlapBlocks)
    }
    /// `cache`: prompt tokens servable from cache, tokens.
    pub fn cached_tokens(&self) -> &'a [u32] {
        self.column(Column::CachedTokens)
    }
    /// `load`: prompt tokens in flight in prefill, tokens.
    pub fn active_prefill_tokens(&self) -> &'a [u32] {
        self.column(Column::ActivePrefillTokens)
    }
    /// `load`: decode blocks the candidate would hold with this request, blocks.
    pub fn decode_blocks(&self) -> &'a [u32] {
        self.column(Column::DecodeBlocks)
    }
    /// `load`: requests in flight.
    pub fn active_requests(&self) -> &'a [u32] {
        self.column(Column::ActiveRequests)
    }
    /// `affinity`: the preferred-taint multiplier per row; `None` when no preference
    /// applies to any candidate (every multiplier would be 1.0) or `affinity` is not
    /// declared.
    pub fn preferred_multiplier(&self) -> Option<&'a [f64]> {
        self.preferred_multiplier
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_indexed_by_the_column_and_names_round_trip() {
        for (i, column) in Column::ALL.into_iter().enumerate() {
            assert_eq!(column as usize, i);
            assert_eq!(Column::from_name(column.name()), Some(column));
            assert_eq!(Column::from_name(&column.snake_name()), Some(column));
        }
        assert_eq!(Column::from_name("worker_id"), None);
    }

    #[test]
    fn packed_columns_slice_back_by_group() {
        let ids = [7u64, 9];
        // dp-rank, then the three load columns (cache not declared).
        let packed = [0, 1, 10, 11, 20, 21, 30, 31];
        let columns = Columns { worker_ids: &ids, packed: &packed, preferred_multiplier: &[] };
        let view = Candidates::new(columns, InputGroups::LOAD).unwrap();
        assert_eq!(view.dp_ranks(), &[0, 1]);
        assert_eq!(view.active_prefill_tokens(), &[10, 11]);
        assert_eq!(view.decode_blocks(), &[20, 21]);
        assert_eq!(view.active_requests(), &[30, 31]);
        assert!(view.cached_tokens().is_empty());
        assert_eq!(view.preferred_multiplier(), None);
    }

    #[test]
    fn every_set_of_groups_slices_the_columns_present_walks_in_wire_order() {
        let ids = [7u64, 9, 11];
        for bits in 0..=InputGroups::ALL.bits() {
            let groups = InputGroups::from_bits_truncate(bits);
            // Row r of column c holds 100·c + r, packed in `present`'s order.
            let packed: Vec<u32> =
                Column::present(groups).flat_map(|c| (0..3).map(move |r| 100 * c as u32 + r)).collect();
            let columns = Columns { worker_ids: &ids, packed: &packed, preferred_multiplier: &[] };
            let view = Candidates::new(columns, groups).unwrap();
            for column in Column::ALL {
                let expected: Vec<u32> = if groups.contains(column.group()) {
                    (0..3).map(|r| 100 * column as u32 + r).collect()
                } else {
                    Vec::new()
                };
                assert_eq!(view.column(column), expected, "{column:?} with groups {bits:#05b}");
            }
            let mut longer = packed.clone();
            longer.push(0);
            let e = Candidates::new(Columns { packed: &longer, ..columns }, groups).unwrap_err();
            assert_eq!((e.expected, e.found), (packed.len(), packed.len() + 1));
        }
        // No candidates: every column empty, whatever is declared.
        let view = Candidates::new(Columns::default(), InputGroups::ALL).unwrap();
        assert!(Column::ALL.into_iter().all(|c| view.column(c).is_empty()));
    }

    #[test]
    fn misaligned_columns_are_refused_with_the_column_named() {
        let ids = [7u64, 9];
        let short = Columns { worker_ids: &ids, packed: &[0, 1, 10], preferred_multiplier: &[] };
        let e = Candidates::new(short, InputGroups::LOAD).unwrap_err();
        assert_eq!((e.column, e.expected, e.found), ("columns", 8, 3));
        let multipliers = Columns { worker_ids: &ids, packed: &[0, 1], preferred_multiplier: &[1.0, 0.5] };
        let e = Candidates::new(multipliers, InputGroups::NONE).unwrap_err();
        assert_eq!((e.column, e.expected, e.found), ("preferred-multiplier", 0, 2));
        let view = Candidates::new(multipliers, InputGroups::AFFINITY).unwrap();
        assert_eq!(view.preferred_multiplier(), Some(&[1.0, 0.5][..]));
    }

    #[test]
    fn columns_that_lie_apart_give_the_packed_view_and_a_short_one_is_named() {
        let ids = [7u64, 9];
        let packed = [0, 1, 10, 11, 20, 21, 30, 31];
        let from_packed = Candidates::new(
            Columns { worker_ids: &ids, packed: &packed, preferred_multiplier: &[] },
            InputGroups::LOAD,
        )
        .unwrap();
        let mut apart: [&[u32]; Column::COUNT] = [&[]; Column::COUNT];
        apart[Column::DpRank as usize] = &packed[0..2];
        apart[Column::ActivePrefillTokens as usize] = &packed[2..4];
        apart[Column::DecodeBlocks as usize] = &packed[4..6];
        apart[Column::ActiveRequests as usize] = &packed[6..8];
        // A column of an undeclared group is not part of the view.
        apart[Column::CachedTokens as usize] = &packed[0..2];
        let view = Candidates::from_columns(&ids, apart, &[], InputGroups::LOAD).unwrap();
        assert_eq!(format!("{view:?}"), format!("{from_packed:?}"));
        apart[Column::DecodeBlocks as usize] = &packed[4..5];
        let e = Candidates::from_columns(&ids, apart, &[], InputGroups::LOAD).unwrap_err();
        assert_eq!((e.column, e.expected, e.found), ("decode-blocks", 2, 1));
    }
}
