//! The event-driven simulation: arrivals in trace order, completions from a time-ordered
//! queue, and every routing decision made by the real selection path as production runs
//! it: a [`GuardedSelector`] (select, then commit; faults contained as its mode says).
//!
//! Deterministic: no clock, no hash-map iteration, ties in the event queue broken by the
//! order events were scheduled, and each request's seed derived from the run's seed.
//! Completions due at or before an arrival's time are processed before it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use sha2::{Digest, Sha256};
use switchyard_guest_sdk::{Pool, RequestFacts};

use super::cluster::PoolState;
use super::config::{Mode, PolicyLabel, ReplayConfig, ReplayError};
use super::report::{Faults, Outcomes, Report};
use super::shadow::Shadow;
use super::trace::{Trace, TraceRow};
use switchyard::guard::GuardedSelector;
use switchyard::selection::{RequestOptions, SelectionRequest, hashes_for_pool};

/// A request in the cluster.
struct Flight {
    row: usize,
    arrival_ms: f64,
    /// Where prefill runs (the only worker in aggregated mode), its index in its pool.
    prefill_worker: usize,
    /// Where decode runs (disaggregated mode), its index in the decode pool.
    decode_worker: usize,
    /// The ids the decode worker holds (unique to the request in a decode pool).
    decode_ids: Vec<u64>,
    uncached_tokens: u64,
    output_blocks: u64,
}

#[derive(Clone, Copy)]
enum Step {
    PrefillDone,
    DecodeDone,
}

/// A scheduled event; the queue pops the earliest, then the first scheduled.
struct Event {
    at_ms: f64,
    seq: u64,
    flight: usize,
    step: Step,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        other.at_ms.total_cmp(&self.at_ms).then(other.seq.cmp(&self.seq))
    }
}

pub(super) struct Simulation<'a> {
    trace: &'a Trace,
    selector: &'a mut GuardedSelector,
    /// Asked on every decision too; never changes the run.
    shadow: Option<&'a mut Shadow>,
    config: &'a ReplayConfig,
    /// The aggregated pool, or the prefill pool.
    front: PoolState,
    /// The decode pool (disaggregated mode).
    decode: Option<PoolState>,
    flights: Vec<Flight>,
    queue: BinaryHeap<Event>,
    seq: u64,
    digest: Sha256,
    decisions: u64,
    faults: Faults,
    outcomes: Outcomes,
}

impl<'a> Simulation<'a> {
    pub fn new(
        trace: &'a Trace,
        selector: &'a mut GuardedSelector,
        shadow: Option<&'a mut Shadow>,
        config: &'a ReplayConfig,
    ) -> Result<Self, ReplayError> {
        let (front_pool, front_count, decode_count) = match config.mode {
            Mode::Aggregated => (Pool::Aggregated, config.workers, 0),
            Mode::Disaggregated => {
                let prefill = config.workers.div_ceil(2);
                (Pool::Prefill, prefill, config.workers - prefill)
            }
        };
        let config_error = |e: switchyard::selection::InputError| ReplayError::Config(e.to_string());
        let front =
            PoolState::new(front_pool, 0, front_count, config.total_kv_blocks).map_err(config_error)?;
        let decode = (decode_count > 0)
            .then(|| {
                PoolState::new(Pool::Decode, u64::from(front_count), decode_count, config.total_kv_blocks)
            })
            .transpose()
            .map_err(config_error)?;
        let rows = trace.rows().len();
        Ok(Self {
            trace,
            selector,
            shadow,
            config,
            front,
            decode,
            flights: Vec::with_capacity(rows),
            queue: BinaryHeap::new(),
            seq: 0,
            digest: Sha256::new(),
            decisions: 0,
            faults: Faults::default(),
            outcomes: Outcomes::new(rows),
        })
    }

    pub fn run(
        mut self,
        policy: &PolicyLabel,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Report, ReplayError> {
        let trace = self.trace;
        for (row, request) in trace.rows().iter().enumerate() {
            let now = request.timestamp as f64 / self.config.speedup;
            while self.queue.peek().is_some_and(|e| e.at_ms <= now) {
                let event = self.queue.pop().expect("peeked");
                self.handle(event)?;
            }
            self.arrive(row, request, now)?;
            progress(row + 1);
        }
        while let Some(event) = self.queue.pop() {
            self.handle(event)?;
        }
        let pools = std::iter::once(&self.front).chain(self.decode.as_ref());
        let per_pool = pools.map(|p| (p.pool, p.workers.iter().map(|w| w.routed).collect())).collect();
        Ok(Report::new(
            self.trace,
            policy,
            self.config,
            self.outcomes,
            per_pool,
            self.decisions,
            hex::encode(self.digest.finalize()),
        )
        .with_faults(self.faults))
    }

    fn schedule(&mut self, at_ms: f64, flight: usize, step: Step) {
        self.seq += 1;
        self.queue.push(Event { at_ms, seq: self.seq, flight, step });
    }

    /// A request arrives: route it to the front pool and queue its prefill.
    fn arrive(&mut self, row: usize, request: &TraceRow, now: f64) -> Result<(), ReplayError> {
        let block_size = self.trace.block_size();
        let pool = self.front.pool;
        let visible = hashes_for_pool(pool, request.hash_ids.clone(), row as u64);
        let chosen = self.route(row, request, pool, visible)?;
        let worker = &mut self.front.workers[chosen];
        let hit_blocks = worker.cache.overlap(&request.hash_ids);
        let hit_tokens = (hit_blocks as u64 * u64::from(block_size)).min(u64::from(request.input_length));
        let uncached_tokens = u64::from(request.input_length) - hit_tokens;
        let output_blocks = u64::from(request.output_length.div_ceil(block_size));
        // Aggregated: the worker holds the prompt and the output until the request ends.
        // Prefill pool: it holds the prompt until the KV is handed to decode.
        let reserved = if pool == Pool::Aggregated { output_blocks } else { 0 };
        worker.admit(&request.hash_ids, reserved);
        worker.prefill_tokens += uncached_tokens;
        let start = worker.prefill_free_at.max(now);
        let done = start + self.config.timing.prefill_ms(uncached_tokens);
        worker.prefill_free_at = done;
        self.outcomes.add_prompt(request.hash_ids.len() as u64, hit_blocks as u64);
        let flight = self.flights.len();
        self.flights.push(Flight {
            row,
            arrival_ms: now,
            prefill_worker: chosen,
            decode_worker: 0,
            decode_ids: Vec::new(),
            uncached_tokens,
            output_blocks,
        });
        self.schedule(done, flight, Step::PrefillDone);
        Ok(())
    }

    fn handle(&mut self, event: Event) -> Result<(), ReplayError> {
        let now = event.at_ms;
        let index = event.flight;
        let row = self.flights[index].row;
        let trace = self.trace;
        let request = &trace.rows()[row];
        match event.step {
            Step::PrefillDone => {
                let flight = &self.flights[index];
                self.outcomes.set_ttft(row, now - flight.arrival_ms);
                let worker = &mut self.front.workers[flight.prefill_worker];
                worker.cache.insert(&request.hash_ids);
                worker.prefill_tokens -= flight.uncached_tokens;
                match self.config.mode {
                    Mode::Aggregated => {
                        worker.decoding += 1;
                        let done = now + self.config.timing.decode_ms(request.output_length, worker.decoding);
                        self.schedule(done, index, Step::DecodeDone);
                    }
                    Mode::Disaggregated => {
                        worker.release(&request.hash_ids, 0);
                        self.hand_to_decode(index, request, now)?;
                    }
                }
            }
            Step::DecodeDone => {
                let flight = &self.flights[index];
                self.outcomes.set_e2e(row, now - flight.arrival_ms, now);
                let (worker, ids) = match &mut self.decode {
                    Some(decode) => (&mut decode.workers[flight.decode_worker], &flight.decode_ids),
                    None => (&mut self.front.workers[flight.prefill_worker], &request.hash_ids),
                };
                worker.decoding -= 1;
                worker.release(ids, flight.output_blocks);
            }
        }
        Ok(())
    }

    /// Disaggregated: prefill ended; route to the decode pool, transfer the KV, decode.
    fn hand_to_decode(&mut self, index: usize, request: &TraceRow, now: f64) -> Result<(), ReplayError> {
        let row = self.flights[index].row;
        let ids = hashes_for_pool(Pool::Decode, request.hash_ids.clone(), row as u64).unwrap_or_default();
        let chosen = self.route(row, request, Pool::Decode, Some(ids.clone()))?;
        let decode = self.decode.as_mut().expect("disaggregated mode has a decode pool");
        let flight = &mut self.flights[index];
        let worker = &mut decode.workers[chosen];
        worker.admit(&ids, flight.output_blocks);
        worker.decoding += 1;
        let start = now + self.config.timing.transfer_ms(ids.len());
        let done = start + self.config.timing.decode_ms(request.output_length, worker.decoding);
        flight.decode_worker = chosen;
        flight.decode_ids = ids;
        self.schedule(done, index, Step::DecodeDone);
        Ok(())
    }

    /// One routing decision through the real selection path, with the hashes the pool
    /// shows (see [`hashes_for_pool`]); returns the worker's index in `pool`'s state and
    /// folds the decision into the digest.
    fn route(
        &mut self,
        row: usize,
        request: &TraceRow,
        pool: Pool,
        hashes: Option<Vec<u64>>,
    ) -> Result<usize, ReplayError> {
        let block_size = self.trace.block_size();
        let state = match pool {
            Pool::Decode => self.decode.as_ref().expect("decode pool exists"),
            _ => &self.front,
        };
        let inputs = state.inputs(hashes.as_deref(), request.input_length, block_size);
        let facts = RequestFacts {
            prompt_tokens: request.input_length,
            block_size,
            request_blocks: request.input_length.div_ceil(block_size),
            // The trace knows the output length; a client's max_tokens would be this.
            expected_output_tokens: Some(request.output_length),
            pinned: None,
            pool,
            seed: request_seed(self.config.seed, row, pool),
        };
        let options = RequestOptions { prefix_hashes: hashes, ..Default::default() };
        let fail = |message: String| ReplayError::Selection { row: row + 1, message };
        let selection_request =
            SelectionRequest::new(&state.table, facts, options, inputs).map_err(|e| fail(e.to_string()))?;
        let decision =
            self.selector.select(&state.table, &selection_request).map_err(|e| fail(e.to_string()))?;
        if let Some(fault) = &decision.fallback {
            self.faults.fallback(fault.kind);
        }
        let selection = decision.selection;
        let commit_fault = self
            .selector
            .commit(&state.table, &selection_request, selection.chosen)
            .map_err(|e| fail(e.to_string()))?;
        if let Some(fault) = commit_fault {
            self.faults.commit(fault.kind);
        }
        if let Some(shadow) = self.shadow.as_deref_mut() {
            shadow.observe(&state.table, &selection_request, self.selector, selection.chosen);
        }
        let index = state.index(selection.chosen.worker_id).ok_or_else(|| {
            fail(format!(
                "the selector chose worker {}, which is not in the pool",
                selection.chosen.worker_id
            ))
        })?;
        self.decisions += 1;
        self.digest.update((row as u64).to_le_bytes());
        self.digest.update([pool_byte(pool)]);
        self.digest.update(selection.chosen.worker_id.to_le_bytes());
        self.digest.update(selection.chosen.dp_rank.to_le_bytes());
        self.digest.update(selection.cost.to_bits().to_le_bytes());
        Ok(index)
    }
}

fn pool_byte(pool: Pool) -> u8 {
    match pool {
        Pool::Aggregated => 0,
        Pool::Prefill => 1,
        Pool::Decode => 2,
    }
}

/// The per-request seed: SplitMix64 over (run seed, row, pool), so each decision's ties
/// and sampling are independent of the others and of the process.
fn request_seed(seed: u64, row: usize, pool: Pool) -> u64 {
    let mut z = seed ^ ((row as u64) << 2 | u64::from(pool_byte(pool))).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
