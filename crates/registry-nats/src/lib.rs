//! Switchyard's registry on NATS JetStream: what a fleet of `switchyard serve` replicas
//! shares instead of one data directory's manifest.
//!
//! - **Tenants and routers** are keys of a key-value bucket, one per record:
//!   `tenant.<name>` holds a [`TenantRecord`](switchyard_store::TenantRecord) (token hash, policies, versions, rollback
//!   history, assignments) as JSON, `router.<name>` a router's token hash. Names are the
//!   service's (`[a-z0-9_-]`, 1–64), valid key tokens as they are.
//! - **Every change is a compare-and-set** on the key's revision ([`Expected`]): a write
//!   made against a revision another replica has since replaced fails with
//!   [`RegistryError::Conflict`], so no update is lost; the writer reloads the key and
//!   decides again (or answers 409).
//! - **Component blobs** are objects of an object store named by their sha256, checked
//!   against it on the way in and on the way out ([`blobs`]).
//! - **Every change is watched** ([`NatsRegistry::watch`]): a replica loads the registry
//!   once ([`NatsRegistry::load`]), then follows the changes after the revision it loaded.
//! - **Records are forward compatible**: a field this build does not know is kept and
//!   written back (`switchyard_store::UnknownFields`); a key whose value it cannot read,
//!   or of a kind it does not know, is skipped at load and in the watch
//!   ([`Event::Unreadable`]), not an error, so one bad record never keeps a replica from
//!   starting.
//!
//! Both buckets use file storage, so a restarted server keeps them. `switchyard serve
//! --registry nats://…` runs on it (`switchyard-service`'s `registry` and `fleet`).

#![forbid(unsafe_code)]

pub mod blobs;
mod error;
mod keys;
mod registry;
pub mod watch;

pub use error::RegistryError;
pub use keys::{Expected, Key};
pub use registry::{Buckets, DEFAULT_BLOB_GRACE, Loaded, NatsRegistry};
pub use watch::{Change, Event, Value};
