//! `switchyard-dynamo` (and Dynamo's own service beside it) end to end, over HTTP, with
//! engines publishing KV events over ZMQ.

mod common;
mod compile;
mod differential;
mod hostile;
mod service;
