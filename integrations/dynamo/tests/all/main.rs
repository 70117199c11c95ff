//! The adapter's tests, inside Dynamo's own selection path: one binary, a module per
//! feature.

mod common;
mod config;
mod contract;
mod hostile;
mod nats;
mod scorer;
mod store;
