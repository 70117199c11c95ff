//! Arbitrary request JSON through parsing, the request limits, the worker table, columns,
//! eligibility and the native default selection: never a panic, always a selection or
//! `invalid-input` / `no-eligible-worker`; and a selection obeys the request (the pick is
//! a candidate, the pinned one when pinned, else an allowed worker when some are allowed).

#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::Selector;
use switchyard::selection::SelectError;
use switchyard::selection::wire::RequestJson;
use switchyard_fuzz::request::{Shape, request};
use switchyard_fuzz::{RequestLimits, json_or_structured};

/// Up to the default `max_dp_size`: a request at the limits is still a few thousand slots.
const SHAPE: Shape = Shape { max_workers: 64, max_dp: 1024, max_hashes: 256 };

fuzz_target!(|data: &[u8]| {
    let text = match json_or_structured(data) {
        Ok(Some(text)) => text.to_owned(),
        Ok(None) => return,
        Err(mut u) => match request(&mut u, SHAPE, None) {
            Ok(value) => value.to_string(),
            Err(_) => return,
        },
    };
    // invalid-input: the JSON, a limit, or the table/columns are refused.
    let Ok(parsed) = RequestJson::parse(&text) else { return };
    let (pinned, allowed) = (parsed.pinned, parsed.allowed_workers.clone());
    let Ok((table, request)) = parsed.into_parts_within(&RequestLimits::default()) else { return };
    let native = switchyard_builtins::find("default").unwrap().native("{}").unwrap();
    let mut selector = Selector::new(native);
    match selector.select(&table, &request) {
        Ok(selection) => {
            assert!(selection.cost.is_finite(), "a non-finite cost was picked: {text}");
            assert!(
                selector.last_candidates().any(|c| c == selection.chosen),
                "the pick is not a candidate: {text}"
            );
            if let Some(p) = pinned {
                assert_eq!((selection.chosen.worker_id, selection.chosen.dp_rank), (p.worker_id, p.dp_rank));
            }
            // A pinned candidate is the only one, whatever the allowed set says.
            if let (None, Some(allowed)) = (pinned, allowed) {
                assert!(allowed.contains(&selection.chosen.worker_id), "not an allowed worker: {text}");
            }
        }
        Err(SelectError::NoEligibleWorker) => {}
        Err(e) => panic!("the native default faulted: {e} on {text}"),
    }
});
