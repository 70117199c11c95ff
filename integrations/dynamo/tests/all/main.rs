//! The adapter's tests, inside Dynamo's own selection path: one binary, a module per
//! feature.

mod class;
mod common;
mod config;
mod contract;
mod hostile;
mod nats;
mod records;
mod scorer;
mod store;
