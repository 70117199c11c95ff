//! The embedded store: a data directory with content-addressed component blobs, one
//! record file per tenant and one of routers. Every write is temp file → fsync → rename →
//! fsync of the directory, so after `kill -9` or a power cut a file is either the old one
//! or the new one, never half.
//!
//! Records are forward compatible: a field this build does not know is kept and written
//! back ([`UnknownFields`]), and a record file it cannot read at all is skipped, not an
//! error for the whole directory ([`Manifest::unreadable`]).
//!
//! Layout (format 2): `tenants/<name>.json` (a tenant's token hash, policies, versions,
//! assignments), `routers.json` (router name → token hash), `blobs/<sha256>.wasm` (the
//! uploaded bytes), `admin.token` (see `auth`), `lock`, and `manifest.json`, which in
//! format 2 only says so (`{"format": 2, "tenants": {}}`, so an older build that wrote
//! the whole registry there refuses the directory instead of starting empty). Every
//! change the service commits touches one tenant or the routers, so a commit writes one
//! small file however many tenants there are. A directory of format 1 (the whole
//! registry in `manifest.json`) is migrated when a [`Store`] opens it. A blob is written
//! before the record that names it, so a record never points at a missing blob.
//!
//! Owner-only: the directory, `tenants/` and `blobs/` are 0700 and owned by this process's
//! user, every file 0600 (modes left wider by an older version are narrowed at open);
//! files are opened without following symlinks. One server at a time: [`Store::open`]
//! takes an exclusive lock on `lock` for the store's lifetime, and a second server on the
//! same directory is refused.
//!
//! Readers: [`StoreReader`] reads the same directory without the lock, for a router's
//! adapter following the registry a running `serve` writes (`switchyard-dynamo`'s store
//! source). Because every file is replaced by rename, a reader sees a whole record, old
//! or new, and every blob it names.

#![forbid(unsafe_code)]

mod dir;
mod records;

pub use dir::{ManifestStamp, Store, StoreReader};
pub use records::{
    Assignment, Canary, CanaryEnd, Holds, Manifest, PolicyRecord, Routed, Shadow, TenantRecord,
    UnknownFields, Unreadable, VersionRecord, valid_name,
};

#[cfg(test)]
mod tests;
