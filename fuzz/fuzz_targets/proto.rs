//! Arbitrary bytes as the protobuf bodies of a select request, a table's put and a delta
//! (`switchyard_proto`): decoding is an error or a value, never a panic; a decoded
//! request goes through the request limits, the worker table and the columns without a
//! panic; and whatever decodes re-encodes to bytes that decode to the same value (and the
//! same bytes again: the encoding is deterministic).

#![no_main]

use std::fmt::Debug;

use libfuzzer_sys::fuzz_target;
use switchyard_fuzz::RequestLimits;
use switchyard_proto::{
    decode_delta, decode_request, decode_table, encode_delta, encode_request, encode_table,
};

/// `value` → bytes → a value: the same (by `Debug`, so a NaN temperature or taint weight
/// compares equal to itself) and the same bytes once more.
fn round_trip<T: Debug, E: Debug>(value: &T, encode: fn(&T) -> Vec<u8>, decode: fn(&[u8]) -> Result<T, E>) {
    let bytes = encode(value);
    let again = decode(&bytes).expect("what was encoded decodes");
    assert_eq!(format!("{again:?}"), format!("{value:?}"));
    assert_eq!(encode(&again), bytes);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = decode_request(data) {
        round_trip(&request, encode_request, decode_request);
        // invalid-input or a table and a request; a `table` is refused (the service's).
        let _ = request.into_parts_within(&RequestLimits::default());
    }
    if let Ok(table) = decode_table(data) {
        round_trip(&table, encode_table, decode_table);
        let _ = RequestLimits::default().check_workers(&table.workers);
    }
    if let Ok(delta) = decode_delta(data) {
        round_trip(&delta, encode_delta, decode_delta);
        let _ = RequestLimits::default().check_workers(&delta.add);
    }
});
