//! The selection service's wire types as protobuf (`proto/switchyard/v1/select.proto`):
//! routers and proxies in front of inference fleets (Envoy's filters, gRPC services)
//! already speak protobuf, and a request of a thousand workers' columns is a fraction of
//! its JSON's bytes and parse time. It is only an encoding: every message decodes into the
//! very types the JSON does ([`RequestJson`], [`TableJson`], [`TableDelta`],
//! [`TenantAnswer`], [`TableVersion`]), so a request is checked, limited and selected from
//! alike whichever way it came, and what a decoder accepts is what those types can hold
//! (an unknown enum value or fault kind is an error naming the field, never a guess).

#![forbid(unsafe_code)]

use prost::Message;
use serde::Deserialize;
use serde::de::value::{Error as ValueError, StrDeserializer};
use switchyard_guest_sdk::{Column, Pool};
use switchyard_selection::wire::{
    CandidateCost, ClassRoute, Receipt, ReceiptAsk, RequestJson, SelectionAnswer, TableDelta, TableJson,
    TableVersion, TenantAnswer, UnroutedClass, WorkerJson, WorkerRankJson,
};
use switchyard_selection::{Fault, FaultKind, InputError, WorkerInputs};

/// The messages prost generates from the `.proto`, for a client that builds them itself;
/// [`decode_request`] and the other functions convert them to and from the JSON types.
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/switchyard.v1.rs"));
}

/// The media type of a protobuf body (`Content-Type`, `Accept`).
pub const CONTENT_TYPE: &str = "application/x-protobuf";

/// A decoded message's field that the JSON type cannot hold, named by its path.
struct FieldError {
    field: &'static str,
    message: String,
}

impl FieldError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self { field, message: message.into() }
    }
}

/// Decodes `bytes` as `M` and converts it; every error starts with `what protobuf: `.
fn decode<M: Message + Default, T>(
    what: &str,
    bytes: &[u8],
    convert: impl FnOnce(M) -> Result<T, FieldError>,
) -> Result<T, InputError> {
    let message = M::decode(bytes).map_err(|e| InputError::new(format!("{what} protobuf: {e}")))?;
    convert(message)
        .map_err(|e| InputError::new(format!("{what} protobuf: field `{}`: {}", e.field, e.message)))
}

/// Decodes a `SelectRequest` (`POST /v1/select`'s protobuf body) into the JSON's type.
pub fn decode_request(bytes: &[u8]) -> Result<RequestJson, InputError> {
    decode("request", bytes, request_from)
}

/// Encodes a request as a `SelectRequest` (a client's, a bench's).
pub fn encode_request(request: &RequestJson) -> Vec<u8> {
    request_to(request).encode_to_vec()
}

/// Decodes a `Table` (the protobuf body of a table's put).
pub fn decode_table(bytes: &[u8]) -> Result<TableJson, InputError> {
    decode("table", bytes, |m: pb::Table| {
        Ok(TableJson { workers: workers_from(m.workers), inputs: inputs_from(m.inputs) })
    })
}

/// Encodes a table as a `Table`.
pub fn encode_table(table: &TableJson) -> Vec<u8> {
    pb::Table { workers: workers_to(&table.workers), inputs: inputs_present(&table.inputs) }.encode_to_vec()
}

/// Decodes a `TableDelta` (the protobuf body of a table's delta).
pub fn decode_delta(bytes: &[u8]) -> Result<TableDelta, InputError> {
    decode("delta", bytes, |m: pb::TableDelta| {
        Ok(TableDelta {
            base_version: m.base_version,
            remove: m.remove,
            add: workers_from(m.add),
            inputs: inputs_from(m.inputs),
        })
    })
}

/// Encodes a delta as a `TableDelta`.
pub fn encode_delta(delta: &TableDelta) -> Vec<u8> {
    pb::TableDelta {
        base_version: delta.base_version,
        remove: delta.remove.clone(),
        add: workers_to(&delta.add),
        inputs: inputs_present(&delta.inputs),
    }
    .encode_to_vec()
}

/// Encodes a selection's answer as a `SelectAnswer`.
pub fn encode_answer(answer: &TenantAnswer) -> Vec<u8> {
    answer_to(answer).encode_to_vec()
}

/// Decodes a `SelectAnswer` (a client's view of the service's answer).
pub fn decode_answer(bytes: &[u8]) -> Result<TenantAnswer, InputError> {
    decode("answer", bytes, answer_from)
}

/// Encodes a table's version (the answer to a put or a delta) as a `TableVersion`.
pub fn encode_table_version(version: &TableVersion) -> Vec<u8> {
    pb::TableVersion {
        tenant: version.tenant.clone(),
        table: version.table.clone(),
        version: version.version,
        workers: version.workers as u64,
        slots: version.slots as u64,
    }
    .encode_to_vec()
}

/// Decodes a `TableVersion`.
pub fn decode_table_version(bytes: &[u8]) -> Result<TableVersion, InputError> {
    decode("table version", bytes, |m: pb::TableVersion| {
        Ok(TableVersion {
            tenant: m.tenant,
            table: m.table,
            version: m.version,
            workers: count("workers", m.workers)?,
            slots: count("slots", m.slots)?,
        })
    })
}

fn request_from(m: pb::SelectRequest) -> Result<RequestJson, FieldError> {
    Ok(RequestJson {
        tenant: m.tenant,
        prompt_tokens: m.prompt_tokens,
        block_size: m.block_size,
        expected_output_tokens: m.expected_output_tokens,
        pool: pool_from(m.pool)?,
        seed: m.seed,
        temperature: m.temperature,
        prefix_hashes: m.prefix_hashes.map(|l| l.values),
        policy_class: m.policy_class,
        classifier_class: m.classifier_class,
        pinned: m.pinned.map(|p| WorkerRankJson { worker_id: p.worker_id, dp_rank: p.dp_rank }),
        allowed_workers: m.allowed_workers.map(|l| l.values),
        preferred_taints: m.preferred_taints,
        workers: workers_from(m.workers),
        table: m.table,
        table_version: m.table_version,
        inputs: inputs_from(m.inputs),
        costs: m.costs,
        receipt: m
            .receipt
            .map(|r| {
                Ok::<_, FieldError>(ReceiptAsk { top: r.top.map_or(Ok(8), |t| count("receipt.top", t))? })
            })
            .transpose()?,
        session: m.session,
    })
}

fn request_to(r: &RequestJson) -> pb::SelectRequest {
    pb::SelectRequest {
        tenant: r.tenant.clone(),
        prompt_tokens: r.prompt_tokens,
        block_size: r.block_size,
        expected_output_tokens: r.expected_output_tokens,
        pool: pool_to(r.pool) as i32,
        seed: r.seed,
        temperature: r.temperature,
        prefix_hashes: r.prefix_hashes.as_ref().map(|v| pb::HashList { values: v.clone() }),
        policy_class: r.policy_class.clone(),
        classifier_class: r.classifier_class.clone(),
        pinned: r.pinned.map(|p| pb::WorkerRank { worker_id: p.worker_id, dp_rank: p.dp_rank }),
        allowed_workers: r.allowed_workers.as_ref().map(|v| pb::U64List { values: v.clone() }),
        preferred_taints: r.preferred_taints.clone(),
        workers: workers_to(&r.workers),
        table: r.table.clone(),
        table_version: r.table_version,
        inputs: inputs_present(&r.inputs),
        costs: r.costs,
        receipt: r.receipt.map(|a| pb::ReceiptAsk { top: Some(a.top as u64) }),
        session: r.session.clone(),
    }
}

/// Absent when there are none, as the JSON's default: a held-table request without rows
/// spends no bytes on them.
fn inputs_present(inputs: &WorkerInputs) -> Option<pb::WorkerInputs> {
    (*inputs != WorkerInputs::default()).then(|| inputs_to(inputs))
}

fn pool_from(value: i32) -> Result<Pool, FieldError> {
    match pb::Pool::try_from(value) {
        Ok(pb::Pool::Aggregated) => Ok(Pool::Aggregated),
        Ok(pb::Pool::Prefill) => Ok(Pool::Prefill),
        Ok(pb::Pool::Decode) => Ok(Pool::Decode),
        Err(_) => Err(FieldError::new(
            "pool",
            format!("{value} is not a pool (aggregated = 0, prefill = 1, decode = 2)"),
        )),
    }
}

fn pool_to(pool: Pool) -> pb::Pool {
    match pool {
        Pool::Aggregated => pb::Pool::Aggregated,
        Pool::Prefill => pb::Pool::Prefill,
        Pool::Decode => pb::Pool::Decode,
    }
}

fn workers_from(workers: Vec<pb::Worker>) -> Vec<WorkerJson> {
    workers
        .into_iter()
        .map(|w| WorkerJson {
            id: w.id,
            // Absent is the JSON's default of one rank; a 0 given stays 0 (also one rank).
            dp_size: w.dp_size.unwrap_or(1),
            total_kv_blocks: w.total_kv_blocks,
            max_num_batched_tokens: w.max_num_batched_tokens,
            taints: w.taints,
        })
        .collect()
}

fn workers_to(workers: &[WorkerJson]) -> Vec<pb::Worker> {
    workers
        .iter()
        .map(|w| pb::Worker {
            id: w.id,
            dp_size: (w.dp_size != 1).then_some(w.dp_size),
            total_kv_blocks: w.total_kv_blocks,
            max_num_batched_tokens: w.max_num_batched_tokens,
            taints: w.taints.clone(),
        })
        .collect()
}

/// The columns move, uncopied, from the decoded message into the inputs. The message is
/// taken apart whole, so a column added to the `.proto` does not compile until it is here.
fn inputs_from(m: Option<pb::WorkerInputs>) -> WorkerInputs {
    let Some(pb::WorkerInputs {
        worker_id,
        dp_rank,
        device_overlap_blocks,
        host_overlap_blocks,
        disk_overlap_blocks,
        cached_tokens,
        active_prefill_tokens,
        decode_blocks,
        active_requests,
    }) = m
    else {
        return WorkerInputs::default();
    };
    // In `Column::ALL` order, as the fields are numbered (checked by the tests).
    let columns = [
        dp_rank,
        device_overlap_blocks,
        host_overlap_blocks,
        disk_overlap_blocks,
        cached_tokens,
        active_prefill_tokens,
        decode_blocks,
        active_requests,
    ];
    let mut inputs = WorkerInputs::new(worker_id);
    for (column, rows) in Column::ALL.into_iter().zip(columns) {
        inputs[column] = rows;
    }
    inputs
}

fn inputs_to(inputs: &WorkerInputs) -> pb::WorkerInputs {
    let [
        dp_rank,
        device_overlap_blocks,
        host_overlap_blocks,
        disk_overlap_blocks,
        cached_tokens,
        active_prefill_tokens,
        decode_blocks,
        active_requests,
    ] = Column::ALL.map(|c| inputs[c].clone());
    pb::WorkerInputs {
        worker_id: inputs.worker_id.clone(),
        dp_rank,
        device_overlap_blocks,
        host_overlap_blocks,
        disk_overlap_blocks,
        cached_tokens,
        active_prefill_tokens,
        decode_blocks,
        active_requests,
    }
}

fn answer_from(m: pb::SelectAnswer) -> Result<TenantAnswer, FieldError> {
    let class =
        m.class.ok_or_else(|| FieldError::new("class", "missing: every answer says how its class routed"))?;
    Ok(TenantAnswer {
        tenant: m.tenant,
        policy_class: m.policy_class,
        class: ClassRoute {
            requested: class.requested,
            assigned: class.assigned,
            reason: reason_from(class.reason)?,
        },
        table_version: m.table_version,
        answer: SelectionAnswer {
            worker_id: m.worker_id,
            dp_rank: m.dp_rank,
            cost: m.cost,
            policy: m.policy,
            build: m.build,
            version: m.version,
            fallback: m.fallback.map(|f| fault_from("fallback.kind", f)).transpose()?,
            commit_fault: m.commit_fault.map(|f| fault_from("commit_fault.kind", f)).transpose()?,
            candidates: count("candidates", m.candidates)?,
            costs: m
                .costs
                .into_iter()
                .map(|c| CandidateCost { worker_id: c.worker_id, dp_rank: c.dp_rank, cost: c.cost })
                .collect(),
            receipt: m.receipt.map(receipt_from).transpose()?,
        },
    })
}

fn receipt_from(r: pb::Receipt) -> Result<Receipt, FieldError> {
    Ok(Receipt {
        top: r
            .top
            .into_iter()
            .map(|c| CandidateCost { worker_id: c.worker_id, dp_rank: c.dp_rank, cost: c.cost })
            .collect(),
        slots: count("receipt.slots", r.slots)?,
        not_pinned: count("receipt.not_pinned", r.not_pinned)?,
        not_allowed: count("receipt.not_allowed", r.not_allowed)?,
        filtered_by_policy: count("receipt.filtered_by_policy", r.filtered_by_policy)?,
        candidates: count("receipt.candidates", r.candidates)?,
        fuel: r.fuel,
        imports: r.imports,
    })
}

fn receipt_to(r: &Receipt) -> pb::Receipt {
    pb::Receipt {
        top: r
            .top
            .iter()
            .map(|c| pb::CandidateCost { worker_id: c.worker_id, dp_rank: c.dp_rank, cost: c.cost })
            .collect(),
        slots: r.slots as u64,
        not_pinned: r.not_pinned as u64,
        not_allowed: r.not_allowed as u64,
        filtered_by_policy: r.filtered_by_policy as u64,
        candidates: r.candidates as u64,
        fuel: r.fuel,
        imports: r.imports.clone(),
    }
}

fn answer_to(t: &TenantAnswer) -> pb::SelectAnswer {
    let a = &t.answer;
    let fault = |f: &Fault| pb::Fault { kind: f.kind.as_str().to_string(), message: f.message.clone() };
    pb::SelectAnswer {
        tenant: t.tenant.clone(),
        policy_class: t.policy_class.clone(),
        class: Some(pb::ClassRoute {
            requested: t.class.requested.clone(),
            assigned: t.class.assigned,
            reason: reason_to(t.class.reason) as i32,
        }),
        table_version: t.table_version,
        worker_id: a.worker_id,
        dp_rank: a.dp_rank,
        cost: a.cost,
        policy: a.policy.clone(),
        build: a.build.clone(),
        version: a.version.clone(),
        fallback: a.fallback.as_ref().map(fault),
        commit_fault: a.commit_fault.as_ref().map(fault),
        candidates: a.candidates as u64,
        costs: a
            .costs
            .iter()
            .map(|c| pb::CandidateCost { worker_id: c.worker_id, dp_rank: c.dp_rank, cost: c.cost })
            .collect(),
        receipt: a.receipt.as_ref().map(receipt_to),
    }
}

fn reason_from(value: i32) -> Result<Option<UnroutedClass>, FieldError> {
    match pb::UnroutedClass::try_from(value) {
        Ok(pb::UnroutedClass::Unspecified) => Ok(None),
        Ok(pb::UnroutedClass::NoClass) => Ok(Some(UnroutedClass::NoClass)),
        Ok(pb::UnroutedClass::UnassignedClass) => Ok(Some(UnroutedClass::UnassignedClass)),
        Err(_) => Err(FieldError::new(
            "class.reason",
            format!("{value} is not a reason (unspecified = 0, no-class = 1, unassigned-class = 2)"),
        )),
    }
}

fn reason_to(reason: Option<UnroutedClass>) -> pb::UnroutedClass {
    match reason {
        None => pb::UnroutedClass::Unspecified,
        Some(UnroutedClass::NoClass) => pb::UnroutedClass::NoClass,
        Some(UnroutedClass::UnassignedClass) => pb::UnroutedClass::UnassignedClass,
    }
}

/// A fault whose kind is one of [`FaultKind`]'s names, parsed by its own (serde) names,
/// as the JSON answer's are.
fn fault_from(field: &'static str, f: pb::Fault) -> Result<Fault, FieldError> {
    let kind = FaultKind::deserialize(StrDeserializer::<ValueError>::new(&f.kind))
        .map_err(|e| FieldError::new(field, e.to_string()))?;
    Ok(Fault { kind, message: f.message })
}

/// A count, which a 32-bit platform may not hold.
fn count(field: &'static str, value: u64) -> Result<usize, FieldError> {
    usize::try_from(value)
        .map_err(|_| FieldError::new(field, format!("{value} does not fit in this platform's usize")))
}

#[cfg(test)]
mod tests;
