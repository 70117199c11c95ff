//! A hostile tenant in one routing group: its policy spins on every selection, and its
//! group is asked as fast as two clients can; the other group's tenant is answered every
//! time, with the same picks as when the hostile group was quiet. (Latency, quiet against
//! hostile, is the HTTP bench's: `cargo bench -p switchyard-dynamo-service`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::json;
use switchyard_test_util::server::temp_dir;

use crate::common::{Dynamo, Engine};

/// Selections of the other group, each of the two rounds.
const ROUNDS: usize = 300;

#[test]
fn a_spinning_policy_in_one_group_leaves_the_other_groups_picks_and_answers_alone() {
    let dir = temp_dir("dynamo-service-hostile");
    let (_server, dynamo) = Dynamo::hostile_neighbours(&dir);
    let dynamo = Arc::new(dynamo);

    // Four workers a group; in group-b each runs a booked request with a different
    // prefill left, so one worker is the cheapest.
    let context = zmq::Context::new();
    let mut engines = Vec::new();
    for (group, base) in [("group-a", 1u64), ("group-b", 11)] {
        for i in 0..4u64 {
            let engine = Engine::new(&context);
            dynamo.register(group, base + i, &engine, 1000);
            engines.push(engine);
            if group == "group-b" {
                dynamo.book(group, base + i, Some([7, 3, 8, 5][i as usize]));
            }
        }
    }
    let body = json!({"routing_group": "group-b", "token_ids": (0..32).collect::<Vec<u32>>()});
    let round = |what: &str| -> Vec<u64> {
        (0..ROUNDS)
            .map(|i| {
                let (status, v) = dynamo.call("POST", "/select", Some(&body));
                assert_eq!(status, 200, "{what}, selection {i}: {v}");
                v["worker_id"].as_u64().unwrap()
            })
            .collect()
    };
    let quiet = round("group-a quiet");
    assert!(quiet.iter().all(|w| *w == 12), "the cheapest, worker 12: {quiet:?}");

    // Group-a asked back to back by two clients, its policy spinning each time.
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let hammers: Vec<_> = (0..2)
        .map(|_| {
            let (dynamo, stop) = (Arc::clone(&dynamo), Arc::clone(&stop));
            let (answered, refused) = (Arc::clone(&answered), Arc::clone(&refused));
            std::thread::spawn(move || {
                let body = json!({"routing_group": "group-a", "token_ids": (0..32).collect::<Vec<u32>>()});
                while !stop.load(Ordering::Relaxed) {
                    match dynamo.try_call("POST", "/select", Some(&body)) {
                        Ok((200, _)) => answered.fetch_add(1, Ordering::Relaxed),
                        Ok(_) => refused.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("group-a: no answer at all: {e}"),
                    };
                }
            })
        })
        .collect();
    while refused.load(Ordering::Relaxed) + answered.load(Ordering::Relaxed) < 20 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let hostile = round("group-a hostile");
    stop.store(true, Ordering::Relaxed);
    for hammer in hammers {
        hammer.join().unwrap();
    }
    assert_eq!(hostile, quiet, "group-b's picks while group-a's policy spins");
    // The spinning policy ran and failed its own group (fail-closed): it was hostile.
    assert!(refused.load(Ordering::Relaxed) > 0, "acme's policy never failed a selection");
    assert_eq!(answered.load(Ordering::Relaxed), 0, "a spinning fail-closed policy answered");
}
