//! The management API: tenants, routers, uploads, assignments, rollback, listing.
//! Every change is committed to the manifest before it is answered (see `state`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use switchyard::selection::wire::ErrorKind;
use switchyard::selection::wire::api::{
    AssignBody, Assigned, ClassEntry, CollectedVersion, CompileSource, Credentials, Listing, NameBody,
    PolicyEntry, RolledBack, Uploaded, VersionEntry,
};

use axum::http::StatusCode;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use switchyard::GuestScorer;
use switchyard_builtins as builtin;

use crate::auth::{Principal, hash_token, new_token, require_admin, require_selector, require_tenant};
use crate::error::ApiError;
use crate::rates::WriteKind;
use crate::state::{Service, Writer};
use crate::tables;
use switchyard::selection::HeldTable;
use switchyard::selection::wire::{TableDelta, TableJson, TableState, TableVersion};
use switchyard_registry_nats::Key;

use crate::store::{Assignment, PolicyRecord, TenantRecord, VersionRecord};

/// Entries of a policy's rollback history, at most (it may name a version more than once,
/// or one since collected; the versions it keeps are bounded by `max_versions_per_policy`).
const MAX_PREVIOUS: usize = 64;

/// The versions `policy` (named `name`) keeps: its active one, those `classes` pin, and
/// those of its rollback and roll-forward histories it still has (a history outlives the
/// versions trimmed from it, so that a rollback to one can say it was collected).
fn kept_versions(
    name: &str,
    policy: &PolicyRecord,
    classes: &BTreeMap<String, Assignment>,
) -> BTreeSet<String> {
    let history = policy.previous.iter().chain(&policy.next).filter(|v| policy.version(v).is_some());
    std::iter::once(&policy.active).chain(history).chain(pinned(name, classes)).cloned().collect()
}

/// The versions of policy `name` that `classes` pin, as the version they route to or as
/// their shadow or canary.
fn pinned<'a>(name: &'a str, classes: &'a BTreeMap<String, Assignment>) -> impl Iterator<Item = &'a String> {
    classes.values().flat_map(move |a| {
        let routed = (a.policy == name).then_some(a.version.as_ref()).flatten();
        let shadow = a.shadow.as_ref().filter(|s| s.policy == name).and_then(|s| s.version.as_ref());
        let canary = a.canary.as_ref().filter(|c| c.policy == name).and_then(|c| c.version.as_ref());
        routed.into_iter().chain(shadow).chain(canary)
    })
}

/// Garbage collection of one tenant's manifest record: every version that is neither a
/// policy's active one, nor in its histories, nor pinned by a class goes. (A class that
/// follows a policy routes to its active version.) The commit then releases the loaded
/// versions, components and blobs nothing names any more. The versions it removed.
pub(crate) fn collect(record: &mut TenantRecord) -> Vec<CollectedVersion> {
    let TenantRecord { policies, classes, .. } = record;
    let mut collected = Vec::new();
    for (name, policy) in policies.iter_mut() {
        let kept = kept_versions(name, policy, classes);
        policy.versions.retain(|v| {
            let keep = kept.contains(&v.version);
            if !keep {
                collected.push(CollectedVersion { policy: name.clone(), version: v.version.clone() });
            }
            keep
        });
    }
    collected
}

/// The versions `before` had that `after` has not (what a write collected).
fn collected_between(before: &TenantRecord, after: &TenantRecord) -> Vec<CollectedVersion> {
    let mut collected = Vec::new();
    for (name, policy) in &before.policies {
        let now = after.policies.get(name);
        for v in &policy.versions {
            if now.and_then(|p| p.version(&v.version)).is_none() {
                collected.push(CollectedVersion { policy: name.clone(), version: v.version.clone() });
            }
        }
    }
    collected
}

/// What an upload's answer says its compile took: this upload's compile alone, never an
/// earlier one's (which may be another tenant's).
fn compile_ms(source: CompileSource, component: &switchyard::PolicyComponent) -> f64 {
    match source {
        CompileSource::Compiled => component.compile_time().as_secs_f64() * 1e3,
        CompileSource::Reused | CompileSource::Cached => 0.0,
    }
}

/// Logs the versions a write of `tenant`'s collected (the metric counts them at commit).
pub(crate) fn log_collected(tenant: &str, collected: &[CollectedVersion]) {
    for c in collected {
        tracing::info!(tenant, policy = %c.policy, version = %c.version, "version collected");
    }
}

/// A version's first 12 hex digits, as messages name it.
fn short(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

/// The version `policy` names for `tenant` (the one given, else the policy's active one,
/// pinned now), or `None` for a builtin; refused when neither.
pub(crate) fn resolve(
    record: &TenantRecord,
    tenant: &str,
    policy: &str,
    version: Option<&str>,
) -> Result<Option<String>, ApiError> {
    if let Some(p) = record.policies.get(policy) {
        return match version {
            Some(v) if p.version(v).is_none() => Err(ApiError::not_found(
                ErrorKind::UnknownVersion,
                format!("policy `{policy}` has no version {v}"),
            )),
            Some(v) => Ok(Some(v.to_string())),
            None => Ok(Some(p.active.clone())),
        };
    }
    if builtin::find(policy).is_some() {
        return match version {
            Some(_) => Err(ApiError::bad_request(
                ErrorKind::InvalidInput,
                "a builtin has no versions; omit `version`",
            )),
            None => Ok(None),
        };
    }
    Err(ApiError::not_found(
        ErrorKind::UnknownPolicy,
        format!(
            "`{policy}` is neither tenant `{tenant}`'s policy nor a builtin ({})",
            builtin::names().join(", ")
        ),
    ))
}

/// Names of tenants, routers, policies and classes: `[a-z0-9_-]`, 1–64 characters, so
/// they are safe in paths, file names and metric labels.
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            ErrorKind::InvalidName,
            format!("{what} `{name}`: use 1–64 characters of a-z, 0-9, `-`, `_`"),
        ))
    }
}

pub(crate) fn unknown_tenant(tenant: &str) -> ApiError {
    ApiError::not_found(ErrorKind::UnknownTenant, format!("no tenant `{tenant}`"))
}

/// The version of an upload: sha256 of the component bytes; with parameters, sha256 of
/// the bytes' sha256, a newline, and the parameters text (so each (bytes, parameters)
/// pair is its own version, and a parameterless upload's version is the file's sha256,
/// as `switchyard select` and `policy check` print it). `upload` passes the parameters'
/// canonical text (`params::canonical_params`), so spacing and key order make no new
/// version.
pub fn version_of(blob_sha256: &str, params: Option<&str>) -> String {
    match params {
        None => blob_sha256.to_string(),
        Some(p) => hex::encode(Sha256::digest(format!("{blob_sha256}\n{p}"))),
    }
}

pub(crate) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(ErrorKind::InvalidInput, format!("body: {e}")))
}

impl Service {
    /// `POST /v1/tenants` (admin): a tenant and its token (shown once).
    pub async fn add_tenant(&self, who: &Principal, body: &[u8]) -> Result<Credentials, ApiError> {
        require_admin(who)?;
        let NameBody { name } = parse(body)?;
        check_name("tenant", &name)?;
        let token = new_token()?;
        let mut writer = self.writer.lock().await;
        let mut manifest = writer.manifest.clone();
        if manifest.tenants.contains_key(&name) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorKind::Exists,
                format!("tenant `{name}` exists"),
            ));
        }
        let record = TenantRecord { token_sha256: hash_token(&token), ..TenantRecord::default() };
        manifest.tenants.insert(name.clone(), Arc::new(record));
        self.commit(&mut writer, manifest, Key::Tenant(name.clone()))?;
        tracing::info!(tenant = %name, "tenant added");
        Ok(Credentials { tenant: Some(name), router: None, token })
    }

    /// `POST /v1/routers` (admin): a router token, which may select for any tenant.
    pub async fn add_router(&self, who: &Principal, body: &[u8]) -> Result<Credentials, ApiError> {
        require_admin(who)?;
        let NameBody { name } = parse(body)?;
        check_name("router", &name)?;
        let token = new_token()?;
        let mut writer = self.writer.lock().await;
        let mut manifest = writer.manifest.clone();
        if manifest.routers.contains_key(&name) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorKind::Exists,
                format!("router `{name}` exists"),
            ));
        }
        manifest.routers.insert(name.clone(), hash_token(&token));
        self.commit(&mut writer, manifest, Key::Router(name.clone()))?;
        Ok(Credentials { tenant: None, router: Some(name), token })
    }

    /// The tenant's record in the current snapshot exists (404 `unknown-tenant` if not).
    pub(crate) fn check_tenant(&self, tenant: &str) -> Result<(), ApiError> {
        match self.snapshot().manifest().tenants.contains_key(tenant) {
            true => Ok(()),
            false => Err(unknown_tenant(tenant)),
        }
    }

    /// Makes `version` the active version of `tenant`'s policy `name` in `policies` (adding
    /// it if new; `classes` are the tenant's): the one it replaces is the newest rollback
    /// target, and the versions rolled back from are no longer ahead of it (their
    /// roll-forward history is cleared). While the policy would keep more than
    /// `max_versions_per_policy` versions, the oldest rollback targets are trimmed (their
    /// names stay in the history). 409 `too-many-versions` when its active and pinned
    /// versions alone are more.
    fn place_upload(
        &self,
        (policies, classes): (&mut BTreeMap<String, PolicyRecord>, &BTreeMap<String, Assignment>),
        tenant: &str,
        name: &str,
        version: VersionRecord,
    ) -> Result<(), ApiError> {
        let policy = policies.entry(name.to_string()).or_insert_with(|| PolicyRecord {
            versions: Vec::new(),
            active: version.version.clone(),
            previous: Vec::new(),
            next: Vec::new(),
        });
        if policy.active != version.version {
            let old = std::mem::replace(&mut policy.active, version.version.clone());
            policy.previous.push(old);
            if policy.previous.len() > MAX_PREVIOUS {
                policy.previous.remove(0);
            }
            policy.next.clear();
        }
        if policy.version(&version.version).is_none() {
            policy.versions.push(version);
        }
        let max = self.limits.max_versions_per_policy;
        loop {
            let kept = kept_versions(name, policy, classes);
            if kept.len() <= max {
                return Ok(());
            }
            let fixed: BTreeSet<&String> =
                std::iter::once(&policy.active).chain(pinned(name, classes)).collect();
            let oldest = policy.previous.iter().find(|v| kept.contains(*v) && !fixed.contains(v)).cloned();
            let Some(oldest) = oldest else {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    ErrorKind::TooManyVersions,
                    format!(
                        "policy `{name}` of tenant `{tenant}` would keep {} versions (the new active one \
                         and {} pinned by classes); the limit is {max} (`max_versions_per_policy`): \
                         move classes off pinned versions first",
                        kept.len(),
                        pinned(name, classes).collect::<BTreeSet<_>>().len(),
                    ),
                ));
            };
            policy.versions.retain(|v| v.version != oldest);
        }
    }

    /// 409 `too-many-classes` if `class` is new and `record` has the most it may.
    fn check_class_count(&self, record: &TenantRecord, tenant: &str, class: &str) -> Result<(), ApiError> {
        let max = self.limits.max_classes_per_tenant;
        if !record.classes.contains_key(class) && record.classes.len() >= max {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorKind::TooManyClasses,
                format!(
                    "tenant `{tenant}` has {} classes; the limit is {max} (`max_classes_per_tenant`)",
                    record.classes.len()
                ),
            ));
        }
        Ok(())
    }

    /// Deletes `blob` (and its artifact) if no committed version names it: what an upload
    /// refused after storing its blob leaves behind. Under the writer lock (see
    /// `Store::remove_blob`).
    fn discard_blob(&self, writer: &Writer, blob: &str) {
        if !writer.names_blob(blob) {
            self.forget_component(writer, blob);
            let _ =
                tokio::task::block_in_place(|| self.loader.registry.remove_blob(blob, &self.loader.engine));
        }
    }

    /// 400 `invalid-params` if an upload's `params` are over `max_params_bytes`.
    fn check_params_size(&self, params: Option<&str>) -> Result<(), ApiError> {
        let max = self.limits.max_params_bytes;
        match params {
            Some(p) if p.len() > max => Err(ApiError::bad_request(
                ErrorKind::InvalidParams,
                format!("`params` are {} bytes; the limit is {max} (`max_params_bytes`)", p.len()),
            )),
            _ => Ok(()),
        }
    }

    fn check_policy_count(&self, record: &TenantRecord, tenant: &str, name: &str) -> Result<(), ApiError> {
        if !record.policies.contains_key(name) && record.policies.len() >= self.limits.max_policies_per_tenant
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorKind::TooManyPolicies,
                format!(
                    "tenant `{tenant}` has {} policies; the limit is {} (`max_policies_per_tenant`)",
                    record.policies.len(),
                    self.limits.max_policies_per_tenant
                ),
            ));
        }
        Ok(())
    }

    /// With `compiler = "tiered"`: compiles `blob` with Cranelift in the background, one
    /// such compile at a time (apart from the `compile_concurrency` permits, so uploads
    /// never wait behind it), then moves every version of it onto Cranelift's code: each
    /// drops its Winch instances and configuration, and its next selection configures an
    /// instance of Cranelift's. If Cranelift fails where Winch succeeded (its compile
    /// timeout, say), the versions stay on Winch's code.
    fn tier_up(self: &Arc<Self>, tenant: &str, blob: String) {
        let tenant = tenant.to_string();
        let service = Arc::clone(self);
        tokio::spawn(async move {
            let Ok(permit) = Arc::clone(&service.tier_up_permits).acquire_owned().await else { return };
            let moved = Arc::clone(&service);
            let done = tokio::task::spawn_blocking(move || {
                let loader = &moved.loader;
                if !loader.awaiting_tier_up(&blob) {
                    return Ok(());
                }
                // Cranelift on a thread of its own in the idle CPU class (inherited by its
                // compile thread): a tier-up takes only the CPU uploads and selections
                // leave, and the class never leaks into a pooled thread. The swap and the
                // reloads, which take locks selections take too, run here, at normal
                // priority: an idle-class thread never holds one of those.
                let (compiling, named) = (Arc::clone(loader), blob.clone());
                let component = std::thread::Builder::new()
                    .name("switchyard-tier-up".into())
                    .spawn(move || {
                        switchyard::lower_thread_priority();
                        compiling.compile_tier_up(&tenant, &named, permit)
                    })
                    .map_err(|e| format!("starting its thread: {e}"))?
                    .join()
                    .map_err(|_| "its thread panicked".to_string())??;
                if loader.swap_tier_up(&blob, component) {
                    for v in moved.snapshot().versions().filter(|v| v.blob() == blob) {
                        v.reload();
                    }
                }
                Ok::<_, String>(())
            })
            .await;
            match done {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => {
                    tracing::warn!(%reason, "tier-up to Cranelift failed; staying on Winch's code")
                }
                Err(e) => tracing::warn!(error = %e, "the tier-up thread"),
            }
            // The artifact Cranelift just wrote, checked as soon as it has settled rather
            // than by the next eviction pass (up to a minute away): the tier-up made its
            // versions cold, that pass drops their component, and a reload before the
            // following pass would hash the artifact on its selection's path.
            tokio::time::sleep(switchyard::artifact_cache::SETTLED + std::time::Duration::from_millis(100))
                .await;
            if let Some(cache) = service.loader.engine.artifact_cache().cloned() {
                let _ = tokio::task::spawn_blocking(move || cache.check_written()).await;
            }
        });
    }

    /// The checks of an upload that need neither its body nor its parameters' meaning:
    /// the caller, the name, the size of `params`, the tenant and its policy count.
    /// `upload` starts with them; the HTTP route runs them before it reads the body too,
    /// so an upload refused for any of these costs no body read, hash or
    /// canonicalisation. The write rates are the route's: it charges an upload to them
    /// once the upload holds its place, before its body is read.
    pub fn precheck_upload(
        &self,
        who: &Principal,
        tenant: &str,
        name: &str,
        params: Option<&str>,
    ) -> Result<(), ApiError> {
        require_tenant(who, tenant)?;
        check_name("policy", name)?;
        if builtin::find(name).is_some() {
            return Err(ApiError::bad_request(
                ErrorKind::InvalidName,
                format!("`{name}` is a builtin's name; choose another"),
            ));
        }
        self.check_params_size(params)?;
        let snapshot = self.snapshot();
        let current = snapshot.manifest().tenants.get(tenant).ok_or_else(|| unknown_tenant(tenant))?;
        self.check_policy_count(current, tenant, name)
    }

    /// `PUT /v1/tenants/{tenant}/policies/{name}`: validate, compile, configure, store,
    /// activate. Answers once the version is durable and routed. Its caller has charged
    /// it to the tenant's write rates (the HTTP route does before reading the body).
    pub async fn upload(
        self: &Arc<Self>,
        who: &Principal,
        tenant: &str,
        name: &str,
        params: Option<String>,
        bytes: Vec<u8>,
    ) -> Result<Uploaded, ApiError> {
        self.precheck_upload(who, tenant, name, params.as_deref())?;
        // Hashed and stored canonical: the same parameters are the same version however
        // they are spaced or ordered, and every instance is configured from that text.
        let params = params.as_deref().map(crate::params::canonical_params).transpose()?;
        let blob = hex::encode(Sha256::digest(&bytes));
        let version = version_of(&blob, params.as_deref());
        let parameters = params.clone().unwrap_or_else(|| "{}".into());
        let record = VersionRecord {
            version: version.clone(),
            blob: blob.clone(),
            params: parameters.clone(),
            size: bytes.len(),
        };
        {
            // Refused before any work if the upload cannot fit (checked again under the
            // lock), on a copy of this policy's record alone.
            let snapshot = self.snapshot();
            let current = snapshot.manifest().tenants.get(tenant).ok_or_else(|| unknown_tenant(tenant))?;
            let mut policy: BTreeMap<String, PolicyRecord> =
                current.policies.get(name).map(|p| (name.to_string(), p.clone())).into_iter().collect();
            self.place_upload((&mut policy, &current.classes), tenant, name, record.clone())?;
        }
        let bytes: Arc<[u8]> = bytes.into();
        let (component, source, permit) = self.loader.compile(tenant, &blob, bytes.clone()).await?;
        let (template, component) = {
            let (name, parameters) = (name.to_string(), parameters.clone());
            tokio::task::spawn_blocking(move || {
                // Configured under the compile permit (its instance takes one of the pool's
                // `compile_concurrency` slots for configure checks); only an instance-less
                // sibling is kept, so the instance goes before the permit does and no upload
                // holds one while it waits for the writer lock.
                let configured = GuestScorer::new(name, component.clone(), &parameters);
                let template = configured.map(|s| s.sibling());
                drop(permit);
                template.map(|t| (t, component))
            })
            .await
            .map_err(|e| ApiError::internal(format!("the configure thread: {e}")))??
        };
        // Written before taking the lock (a component's fsync must not hold every writer).
        let store_bytes = bytes.clone();
        tokio::task::block_in_place(|| self.loader.registry.write_blob(&blob, &store_bytes))
            .map_err(|e| e.into_api("storing the component"))?;

        let mut writer = self.writer.lock().await;
        let mut manifest = writer.manifest.clone();
        let before = manifest.tenants.get(tenant).cloned();
        let placed = match manifest.tenants.get_mut(tenant).map(Arc::make_mut) {
            None => Err(unknown_tenant(tenant)),
            Some(current) => self
                .check_policy_count(current, tenant, name)
                .and_then(|()| {
                    self.place_upload((&mut current.policies, &current.classes), tenant, name, record.clone())
                })
                .map(|()| {
                    collect(current);
                    before.as_deref().map(|b| collected_between(b, current)).unwrap_or_default()
                }),
        };
        // A write that collected the last version naming this blob may have deleted it
        // since: under the lock, make sure it is there before the manifest names it (a
        // no-op, one `stat`, when it is).
        let stored = placed.and_then(|collected| {
            tokio::task::block_in_place(|| self.loader.registry.write_blob(&blob, &bytes))
                .map(|()| collected)
                .map_err(|e| e.into_api("storing the component"))
        });
        let collected = match stored {
            Ok(collected) => collected,
            Err(e) => {
                self.discard_blob(&writer, &blob);
                return Err(e);
            }
        };
        self.loader.keep(&blob, component.clone());
        let key = (tenant.to_string(), name.to_string(), version.clone());
        // A re-upload of a version that did not load (at start-up, say) makes it available.
        if writer.loaded.get(&key).is_none_or(|v| v.failure().is_some()) {
            let loaded = self.new_version((tenant, name), &record, template);
            writer.loaded.insert(key, loaded);
        }
        if let Err(e) = self.commit(&mut writer, manifest, Key::Tenant(tenant.to_string())) {
            self.discard_blob(&writer, &blob);
            return Err(e);
        }
        // On a fleet, another replica's sweep takes only blobs no tenant names that are
        // older than the grace; the check above made this one young. Should a sweep still
        // have taken it in between (one round trip), it goes back now that it is named.
        if let Err(e) = tokio::task::block_in_place(|| self.loader.registry.write_blob(&blob, &bytes)) {
            tracing::warn!(tenant, policy = name, %blob, error = ?e, "checking the committed version's blob");
        }
        tracing::info!(tenant, policy = name, version = %version, size = bytes.len(), compile = ?source, "uploaded");
        log_collected(tenant, &collected);
        if self.loader.on_first_tier(&component) {
            self.tier_up(tenant, blob.clone());
        }
        Ok(Uploaded {
            tenant: tenant.into(),
            policy: name.into(),
            version,
            sha256: blob,
            size_bytes: bytes.len(),
            compile: source,
            compile_ms: compile_ms(source, &component),
            compiler: component.compiled_by().name().into(),
            collected,
        })
    }

    /// `PUT /v1/tenants/{tenant}/classes/{class}`: routes a class to a builtin or one of
    /// the tenant's policies (a pinned version, or whichever is active).
    pub async fn assign(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
        body: &[u8],
    ) -> Result<Assigned, ApiError> {
        require_tenant(who, tenant)?;
        check_name("class", class)?;
        self.check_tenant(tenant)?;
        self.rates.admit(tenant, &self.limits, WriteKind::Assign)?;
        let AssignBody { policy, version, on_fault } = parse(body)?;
        let mut writer = self.writer.lock().await;
        let mut manifest = writer.manifest.clone();
        let record =
            manifest.tenants.get_mut(tenant).map(Arc::make_mut).ok_or_else(|| unknown_tenant(tenant))?;
        self.check_class_count(record, tenant, class)?;
        let effective = resolve(record, tenant, &policy, version.as_deref())?;
        // A class's trials (its shadow, canary, capture) stay with it as it is reassigned.
        let trials = record.classes.remove(class).unwrap_or_default();
        record.classes.insert(
            class.to_string(),
            Assignment { policy: policy.clone(), version: version.clone(), on_fault, ..trials },
        );
        let collected = collect(record);
        self.commit(&mut writer, manifest, Key::Tenant(tenant.to_string()))?;
        tracing::info!(tenant, class, policy = %policy, version = ?effective, on_fault = ?on_fault, "assigned");
        log_collected(tenant, &collected);
        Ok(Assigned {
            tenant: tenant.into(),
            class: class.into(),
            policy,
            pinned: version.is_some(),
            version: effective,
            on_fault,
            collected,
        })
    }

    /// `POST /v1/tenants/{tenant}/policies/{name}/rollback`: the version active before the
    /// current one becomes active again, and the current one the next roll-forward's
    /// target. Nothing is collected: the versions kept stay the same.
    pub async fn rollback(&self, who: &Principal, tenant: &str, name: &str) -> Result<RolledBack, ApiError> {
        self.step(who, tenant, name, Step::Back).await
    }

    /// `POST /v1/tenants/{tenant}/policies/{name}/rollforward`: undoes the last rollback
    /// (the version it replaced becomes active again, and the current one the next
    /// rollback's target). Nothing is collected.
    pub async fn rollforward(
        &self,
        who: &Principal,
        tenant: &str,
        name: &str,
    ) -> Result<RolledBack, ApiError> {
        self.step(who, tenant, name, Step::Forward).await
    }

    /// A rollback or roll-forward: the version on top of one history becomes active, the
    /// active one goes on top of the other. Refused, changing nothing, when that history
    /// is empty or its top version was collected.
    async fn step(
        &self,
        who: &Principal,
        tenant: &str,
        name: &str,
        step: Step,
    ) -> Result<RolledBack, ApiError> {
        require_tenant(who, tenant)?;
        self.check_tenant(tenant)?;
        self.rates.admit(tenant, &self.limits, WriteKind::Rollback)?;
        let mut writer = self.writer.lock().await;
        let mut manifest = writer.manifest.clone();
        let record =
            manifest.tenants.get_mut(tenant).map(Arc::make_mut).ok_or_else(|| unknown_tenant(tenant))?;
        let policy = record.policies.get_mut(name).ok_or_else(|| {
            ApiError::not_found(ErrorKind::UnknownPolicy, format!("tenant `{tenant}` has no policy `{name}`"))
        })?;
        let PolicyRecord { versions, active, previous, next } = policy;
        let (from, to) = match step {
            Step::Back => (previous, next),
            Step::Forward => (next, previous),
        };
        let conflict = |kind, message: String| Err(ApiError::new(StatusCode::CONFLICT, kind, message));
        let Some(target) = from.last().cloned() else {
            return match step {
                Step::Back => conflict(
                    ErrorKind::NoPreviousVersion,
                    format!("policy `{name}` has no version before {}, its active one", short(active)),
                ),
                Step::Forward => conflict(
                    ErrorKind::NoNewerVersion,
                    format!(
                        "policy `{name}` has no newer version than {}, its active one (none was rolled \
                         back from since its last upload)",
                        short(active)
                    ),
                ),
            };
        };
        if !versions.iter().any(|v| v.version == target) {
            let max = self.limits.max_versions_per_policy;
            let which = match step {
                Step::Back => "active before",
                Step::Forward => "rolled back from to",
            };
            return conflict(
                ErrorKind::VersionCollected,
                format!(
                    "version {} of policy `{name}` ({which} {}) was collected: a policy keeps at most \
                     {max} versions (`max_versions_per_policy`)",
                    short(&target),
                    short(active),
                ),
            );
        }
        from.pop();
        let replaced = std::mem::replace(active, target.clone());
        to.push(replaced.clone());
        if to.len() > MAX_PREVIOUS {
            to.remove(0);
        }
        let (previous, next) = (policy.previous.clone(), policy.next.clone());
        self.commit(&mut writer, manifest, Key::Tenant(tenant.to_string()))?;
        let done = match step {
            Step::Back => "rolled back",
            Step::Forward => "rolled forward",
        };
        tracing::info!(tenant, policy = name, version = %target, replaced = %replaced, "{done}");
        Ok(RolledBack {
            tenant: tenant.into(),
            policy: name.into(),
            version: target,
            replaced,
            previous,
            next,
        })
    }

    /// `GET /v1/tenants/{tenant}/policies`: names, versions (each with its quarantine
    /// breaker's state), the active one, counters, and the class assignments.
    pub fn list(&self, who: &Principal, tenant: &str) -> Result<Listing, ApiError> {
        require_tenant(who, tenant)?;
        let snapshot = self.snapshot();
        let record = snapshot.manifest().tenants.get(tenant).ok_or_else(|| unknown_tenant(tenant))?;
        let policies = record
            .policies
            .iter()
            .map(|(name, p)| {
                let m = self.metrics.policy(tenant, name);
                let versions = p.versions.iter().map(|v| VersionEntry {
                    version: v.version.clone(),
                    sha256: v.blob.clone(),
                    size_bytes: v.size,
                    params: v.params.clone(),
                    // Each version's own quarantine breaker (every stored version is loaded).
                    breaker: snapshot.version(tenant, name, &v.version).map(|l| l.breaker().state()),
                    unavailable: snapshot.unavailable(tenant, name, &v.version).map(|r| r.to_string()),
                });
                PolicyEntry {
                    name: name.clone(),
                    active: p.active.clone(),
                    versions: versions.collect(),
                    previous: p.previous.clone(),
                    next: p.next.clone(),
                    selections: m.selections(),
                    faults: m.faults().into_iter().map(|(kind, n)| (kind.to_string(), n)).collect(),
                }
            })
            .collect();
        let classes = record
            .classes
            .iter()
            .map(|(class, a)| {
                let effective =
                    a.version.clone().or_else(|| record.policies.get(&a.policy).map(|p| p.active.clone()));
                let entry = ClassEntry {
                    policy: a.policy.clone(),
                    pinned: a.version.is_some(),
                    version: effective,
                    on_fault: a.on_fault,
                };
                (class.clone(), entry)
            })
            .collect();
        let builtins = builtin::names().into_iter().map(str::to_string).collect();
        Ok(Listing { tenant: tenant.into(), policies, classes, builtins })
    }
}

/// Which way a rollback or roll-forward goes through a policy's history.
#[derive(Clone, Copy)]
enum Step {
    Back,
    Forward,
}

// Held worker tables (`tables`): put, changed, read, deleted; selections read them.

fn table_version(tenant: &str, table: &str, held: &HeldTable) -> TableVersion {
    TableVersion {
        tenant: tenant.to_string(),
        table: table.to_string(),
        version: held.version(),
        workers: held.table().workers().len(),
        slots: held.table().slots().len(),
    }
}

impl Service {
    /// The caller may act for `tenant`'s tables (the tenant, a router, the admin), and
    /// the tenant exists.
    fn table_owner(&self, who: &Principal, tenant: &str) -> Result<(), ApiError> {
        require_selector(who, tenant)?;
        if self.snapshot().route(tenant, None).is_none() {
            return Err(ApiError::not_found(ErrorKind::UnknownTenant, format!("no tenant `{tenant}`")));
        }
        Ok(())
    }

    /// `PUT …/tables/{table}`: the table, whole, as a new version.
    pub fn put_table(
        &self,
        who: &Principal,
        tenant: &str,
        table: &str,
        body: TableJson,
    ) -> Result<TableVersion, ApiError> {
        check_name("table", table)?;
        self.table_owner(who, tenant)?;
        let invalid = |e: switchyard::selection::InputError| {
            ApiError::bad_request(ErrorKind::InvalidInput, e.to_string())
        };
        let tables = self.tables.tenant_or_new(tenant);
        let max = self.limits.max_tables_per_tenant;
        let over = |tables: &HashMap<String, Arc<HeldTable>>| {
            (!tables.contains_key(table) && tables.len() >= max).then(|| {
                ApiError::new(
                    StatusCode::CONFLICT,
                    ErrorKind::TooManyTables,
                    format!(
                        "tenant `{tenant}` has {} tables; the limit is {max} (`max_tables_per_tenant`): delete one first",
                        tables.len()
                    ),
                )
            })
        };
        // Refused before the table is built (no work for a put that cannot land), and
        // again under the lock it is inserted under.
        if let Some(refusal) = over(&tables::lock(&tables)) {
            return Err(refusal);
        }
        let held = HeldTable::new(body.workers, body.inputs, self.tables.version(), self.limits.requests())
            .map_err(invalid)?;
        let mut tables = tables::lock(&tables);
        if let Some(refusal) = over(&tables) {
            return Err(refusal);
        }
        let answer = table_version(tenant, table, &held);
        tables.insert(table.to_string(), Arc::new(held));
        Ok(answer)
    }

    /// `POST …/tables/{table}/deltas`: the change, on the version it names only.
    pub fn change_table(
        &self,
        who: &Principal,
        tenant: &str,
        table: &str,
        delta: TableDelta,
    ) -> Result<TableVersion, ApiError> {
        self.table_owner(who, tenant)?;
        let current = self.tables.get(tenant, table)?;
        let base = delta.base_version;
        if base != current.version() {
            return Err(tables::wrong_version(table, base, current.version(), "the delta is based on"));
        }
        let changed = current
            .apply(delta, self.tables.version(), self.limits.requests())
            .map_err(|e| ApiError::bad_request(ErrorKind::InvalidInput, e.to_string()))?;
        let tables = self.tables.tenant_or_new(tenant);
        let mut tables = tables::lock(&tables);
        // Another change of the same version may have landed while this one was built.
        match tables.get(table) {
            Some(now) if now.version() == base => {}
            Some(now) => {
                return Err(tables::wrong_version(table, base, now.version(), "the delta is based on"));
            }
            None => return Err(tables::unknown_table(tenant, table)),
        }
        let answer = table_version(tenant, table, &changed);
        tables.insert(table.to_string(), Arc::new(changed));
        Ok(answer)
    }

    /// `GET …/tables/{table}`: the current version, whole.
    pub fn table_state(&self, who: &Principal, tenant: &str, table: &str) -> Result<TableState, ApiError> {
        self.table_owner(who, tenant)?;
        let held = self.tables.get(tenant, table)?;
        Ok(TableState {
            tenant: tenant.to_string(),
            table: table.to_string(),
            version: held.version(),
            workers: held.workers_json(),
            inputs: held.inputs().clone(),
        })
    }

    /// `DELETE …/tables/{table}`.
    pub fn delete_table(
        &self,
        who: &Principal,
        tenant: &str,
        table: &str,
    ) -> Result<serde_json::Value, ApiError> {
        self.table_owner(who, tenant)?;
        let removed = self.tables.tenant(tenant).and_then(|tables| tables::lock(&tables).remove(table));
        match removed {
            Some(_) => Ok(serde_json::json!({ "tenant": tenant, "table": table, "deleted": true })),
            None => Err(tables::unknown_table(tenant, table)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard::FailMode;

    fn version(v: &str) -> VersionRecord {
        VersionRecord { version: v.into(), blob: format!("blob-{v}"), params: "{}".into(), size: 1 }
    }

    fn names(policy: &PolicyRecord) -> Vec<&str> {
        policy.versions.iter().map(|v| v.version.as_str()).collect()
    }

    #[test]
    fn collection_keeps_the_active_the_pinned_and_the_rollback_targets_only() {
        let policy = PolicyRecord {
            versions: ["a", "b", "c", "d", "e"].map(version).to_vec(),
            active: "e".into(),
            previous: vec!["b".into()],
            next: Vec::new(),
        };
        let mut record =
            TenantRecord { policies: BTreeMap::from([("p".into(), policy)]), ..Default::default() };
        let pin = |v: Option<&str>, policy: &str| Assignment {
            policy: policy.into(),
            version: v.map(str::to_string),
            on_fault: FailMode::Open,
            ..Assignment::default()
        };
        record.classes.insert("pinned".into(), pin(Some("c"), "p"));
        record.classes.insert("follows".into(), pin(None, "p"));
        // A pin of another policy's version of the same name keeps nothing here.
        record.classes.insert("other".into(), pin(Some("a"), "q"));
        collect(&mut record);
        assert_eq!(names(&record.policies["p"]), ["b", "c", "e"]);
    }
}
