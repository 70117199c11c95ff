//! The requests hostile guests meet, shared by the bounds tests (`runtime/tests/all/bounds.rs`)
//! and `--bench hostile`, so the bench's table is measured on the requests the tests
//! check.

use switchyard_guest_sdk::{Column, Pool, RequestFacts};
use switchyard_selection::{RequestOptions, SelectionRequest, Worker, WorkerInputs, WorkerTable};

/// A fleet of `workers` (capacities advertised, every slot a row) and a prompt of
/// `prompt_tokens` in `block_size` blocks carrying `hashes` prefix hashes, class `gold`.
pub fn fleet(
    workers: u64,
    prompt_tokens: u32,
    block_size: u32,
    hashes: u64,
) -> (WorkerTable, SelectionRequest) {
    let table = WorkerTable::new(
        (0..workers).map(|id| Worker::new(id, 1, 100_000 + id as u32, Some(8192))).collect(),
    )
    .expect("unique ids");
    let n = workers as usize;
    let inputs = WorkerInputs::new((0..workers).collect())
        .with(Column::DeviceOverlapBlocks, (0..n).map(|i| (i % 97) as u32).collect())
        .with(Column::DecodeBlocks, (0..n).map(|i| (i * 7 % 1000) as u32).collect())
        .with(Column::ActiveRequests, (0..n).map(|i| (i % 5) as u32).collect());
    let facts = RequestFacts {
        prompt_tokens,
        block_size,
        request_blocks: prompt_tokens.div_ceil(block_size),
        expected_output_tokens: None,
        pinned: None,
        pool: Pool::Aggregated,
        seed: 7,
    };
    let options = RequestOptions {
        prefix_hashes: Some((0..hashes).map(|h| h.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect()),
        policy_class: Some("gold".into()),
        ..RequestOptions::default()
    };
    (table.clone(), SelectionRequest::new(&table, facts, options, inputs).expect("valid request"))
}

/// The hostile requests, a tenant's own: a long-context prompt over 1,024 workers, a
/// 4-billion-token prompt in 1-token blocks, tens of thousands of hashes, and 10,000
/// workers.
pub fn hostile() -> Vec<(&'static str, (WorkerTable, SelectionRequest))> {
    vec![
        ("1,024 w, 128K tok, 8,192 hashes", fleet(1024, 131_072, 16, 8192)),
        ("16 w, u32::MAX tokens, block 1", fleet(16, u32::MAX, 1, 0)),
        ("16 w, 50,000 hashes", fleet(16, 800_000, 16, 50_000)),
        ("10,000 w, 8,192 hashes", fleet(10_000, 131_072, 16, 8192)),
    ]
}
