//! The registry's tests run on `switchyard_test_util::nats::NatsServer`.

use std::path::Path;

use switchyard_registry_nats::{Buckets, NatsRegistry};
pub use switchyard_test_util::nats::NatsServer;

/// A server for the test `name`.
pub fn start(name: &str) -> NatsServer {
    NatsServer::start(Path::new(env!("CARGO_TARGET_TMPDIR")), name)
}

/// A registry client of `server`.
pub async fn registry(server: &NatsServer) -> NatsRegistry {
    NatsRegistry::connect(&server.url(), &Buckets::default()).await.expect("connects")
}
