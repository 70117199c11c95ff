//! A class's rollout through the API: its shadow, canary and capture set and cleared
//! (committed to its assignment, so they travel through a fleet's registry), a canary
//! promoted, aborted or rolled back by itself, and what this replica saw of each.
//! Reading a report or a capture is the tenant's (or the admin's) alone.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use switchyard::selection::wire::ErrorKind;
use switchyard::selection::wire::api::{
    CanaryBody, CanaryStatus, CaptureBody, PolicyRef, Rollout, ShadowBody, ShadowReport,
};
use switchyard_registry_nats::Key;

use crate::auth::{Principal, require_tenant};
use crate::error::ApiError;
use crate::manage::{check_name, collect, log_collected, parse, resolve, unknown_tenant};
use crate::rates::WriteKind;
use crate::state::{Route, Service};
use crate::store::{Assignment, Canary, CanaryEnd, Shadow, TenantRecord};

/// A canary's defaults: its fault rate, selections before it is judged, the window.
const MAX_FAULT_RATE: f64 = 0.05;
const MIN_SELECTIONS: u32 = 20;
const WINDOW: u32 = 100;

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn invalid(message: String) -> ApiError {
    ApiError::bad_request(ErrorKind::InvalidInput, message)
}

fn unknown_class(tenant: &str, class: &str) -> ApiError {
    ApiError::not_found(
        ErrorKind::UnknownClass,
        format!(
            "tenant `{tenant}` has not assigned class `{class}`: assign it first (PUT /v1/tenants/{tenant}/classes/{class})"
        ),
    )
}

/// What `a` routes to, as a [`PolicyRef`].
fn live(record: &TenantRecord, a: &Assignment) -> PolicyRef {
    let version = a.version.clone().or_else(|| record.policies.get(&a.policy).map(|p| p.active.clone()));
    PolicyRef { policy: a.policy.clone(), version }
}

fn rollout(tenant: &str, class: &str, record: &TenantRecord, a: &Assignment) -> Rollout {
    Rollout {
        tenant: tenant.into(),
        class: class.into(),
        live: live(record, a),
        shadow: a.shadow.clone(),
        canary: a.canary.clone(),
        capture: a.capture,
        last_canary: a.last_canary.clone(),
    }
}

/// What a write does to a class's assignment; the record is the tenant's as committed.
type Change<'a> = Box<dyn FnOnce(&TenantRecord, &mut Assignment) -> Result<(), ApiError> + Send + 'a>;

impl Service {
    /// Changes `class` of `tenant`'s assignment by `change` and commits it (collecting
    /// what it no longer keeps): the class's rollout as it is now.
    async fn change_class(&self, tenant: &str, class: &str, change: Change<'_>) -> Result<Rollout, ApiError> {
        let mut writer = self.writer.lock().await;
        let mut manifest = writer.manifest.clone();
        let record =
            manifest.tenants.get_mut(tenant).map(Arc::make_mut).ok_or_else(|| unknown_tenant(tenant))?;
        let before = record.clone();
        let a = record.classes.get_mut(class).ok_or_else(|| unknown_class(tenant, class))?;
        change(&before, a)?;
        let collected = collect(record);
        let record = record.clone();
        let a = record.classes.get(class).expect("changed above");
        let answer = rollout(tenant, class, &record, a);
        self.commit(&mut writer, manifest, Key::Tenant(tenant.to_string()))?;
        log_collected(tenant, &collected);
        Ok(answer)
    }

    /// The checks of every rollout write: the tenant's (or the admin's), a class name,
    /// within the tenant's writes per minute.
    fn rollout_write(&self, who: &Principal, tenant: &str, class: &str) -> Result<(), ApiError> {
        require_tenant(who, tenant)?;
        check_name("class", class)?;
        self.check_tenant(tenant)?;
        self.rates.admit(tenant, &self.limits, WriteKind::Assign)
    }

    /// `PUT /v1/tenants/{tenant}/classes/{class}/shadow`: runs a version (the one named,
    /// else the policy's active one, pinned now) beside the class's on `rate` of its
    /// selections; a new policy or version starts a new report.
    pub async fn set_shadow(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
        body: &[u8],
    ) -> Result<Rollout, ApiError> {
        self.rollout_write(who, tenant, class)?;
        let ShadowBody { policy, version, rate } = parse(body)?;
        if !(0.0..=1.0).contains(&rate) {
            return Err(invalid(format!("rate {rate} is not between 0 and 1")));
        }
        let answer = self
            .change_class(
                tenant,
                class,
                Box::new(move |record, a| {
                    let version = resolve(record, tenant, &policy, version.as_deref())?;
                    a.shadow = Some(Shadow { policy, version, rate });
                    Ok(())
                }),
            )
            .await?;
        tracing::info!(tenant, class, shadow = ?answer.shadow, "shadow set");
        Ok(answer)
    }

    /// `DELETE /v1/tenants/{tenant}/classes/{class}/shadow`: no more shadow runs (its
    /// report stays readable until another is set).
    pub async fn clear_shadow(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
    ) -> Result<Rollout, ApiError> {
        self.rollout_write(who, tenant, class)?;
        self.change_class(
            tenant,
            class,
            Box::new(|_, a| {
                a.shadow = None;
                Ok(())
            }),
        )
        .await
    }

    /// `PUT /v1/tenants/{tenant}/classes/{class}/canary`: routes `weight` percent of the
    /// class's request keys to a version (pinned now); replaces a running canary.
    pub async fn set_canary(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
        body: &[u8],
    ) -> Result<Rollout, ApiError> {
        self.rollout_write(who, tenant, class)?;
        let CanaryBody { policy, version, weight, max_fault_rate, min_selections, window } = parse(body)?;
        if !(0.0..=100.0).contains(&weight) {
            return Err(invalid(format!("weight {weight} is not a percentage (0 to 100)")));
        }
        let max_fault_rate = max_fault_rate.unwrap_or(MAX_FAULT_RATE);
        if !(0.0..=1.0).contains(&max_fault_rate) {
            return Err(invalid(format!("max_fault_rate {max_fault_rate} is not between 0 and 1")));
        }
        let window = window.unwrap_or(WINDOW);
        if window == 0 || window > 100_000 {
            return Err(invalid(format!("window {window} is not between 1 and 100000 selections")));
        }
        let min_selections = min_selections.unwrap_or(MIN_SELECTIONS);
        let answer = self
            .change_class(
                tenant,
                class,
                Box::new(move |record, a| {
                    let version = resolve(record, tenant, &policy, version.as_deref())?;
                    // `since` tells canaries apart: a new one counts afresh.
                    let since = now().max(a.canary.as_ref().map_or(0, |c| c.since + 1));
                    a.canary = Some(Canary {
                        policy,
                        version,
                        weight,
                        max_fault_rate,
                        min_selections,
                        window,
                        since,
                    });
                    Ok(())
                }),
            )
            .await?;
        tracing::info!(tenant, class, canary = ?answer.canary, "canary set");
        Ok(answer)
    }

    /// `POST /v1/tenants/{tenant}/classes/{class}/canary/promote`: the canary's version
    /// becomes the class's own (pinned), and the canary ends.
    pub async fn promote(&self, who: &Principal, tenant: &str, class: &str) -> Result<Rollout, ApiError> {
        self.rollout_write(who, tenant, class)?;
        self.end_canary(tenant, class, None, "promoted", format!("promoted by {}", who.describe())).await
    }

    /// `POST /v1/tenants/{tenant}/classes/{class}/canary/abort`: the canary ends; the
    /// class's own version decides all of it again.
    pub async fn abort(&self, who: &Principal, tenant: &str, class: &str) -> Result<Rollout, ApiError> {
        self.rollout_write(who, tenant, class)?;
        self.end_canary(tenant, class, None, "aborted", format!("aborted by {}", who.describe())).await
    }

    /// Ends the class's canary (only `expected`, if given: a rollback must not end a
    /// canary set since), recording how, when and why.
    async fn end_canary(
        &self,
        tenant: &str,
        class: &str,
        expected: Option<u64>,
        outcome: &'static str,
        reason: String,
    ) -> Result<Rollout, ApiError> {
        self.change_class(
            tenant,
            class,
            Box::new(move |_, a| {
                let Some(canary) = a.canary.take().filter(|c| expected.is_none_or(|since| c.since == since))
                else {
                    let ended = a.last_canary.as_ref().map_or(String::new(), |e| {
                        format!(" (the last one was {} at {}: {})", e.outcome, e.at, e.reason)
                    });
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        ErrorKind::NoCanary,
                        format!("class `{class}` has no canary running{ended}"),
                    ));
                };
                if outcome == "promoted" {
                    a.policy = canary.policy.clone();
                    a.version = canary.version.clone();
                }
                a.last_canary = Some(CanaryEnd {
                    policy: canary.policy,
                    version: canary.version,
                    outcome: outcome.into(),
                    reason,
                    at: now(),
                });
                Ok(())
            }),
        )
        .await
    }

    /// A selection found `canary` of `route`'s class past its fault rate, or its breaker
    /// open: no request goes to it on this replica from now on (the selection's trials
    /// said so), and its end is committed in the background, so every replica's class
    /// serves the stable version again.
    pub(crate) fn roll_back_canary(&self, tenant: &str, route: &Route, canary: &Canary, reason: String) {
        let Some(class) = route.trials.as_ref().map(|t| t.class.clone()) else { return };
        tracing::warn!(tenant, class = %class, canary = %canary.policy, version = ?canary.version, reason = %reason, "canary rolled back");
        let (Some(me), Ok(runtime)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let (tenant, since) = (tenant.to_string(), canary.since);
        runtime.spawn(async move {
            if let Err(e) = me.end_canary(&tenant, &class, Some(since), "rolled-back", reason).await
                && e.kind() != ErrorKind::NoCanary
            {
                tracing::warn!(tenant = %tenant, class = %class, error = %e.message(), "committing a canary's rollback");
            }
        });
    }

    /// `PUT /v1/tenants/{tenant}/classes/{class}/capture`: keeps the class's last
    /// `selections` (each replica its own), readable as a trace.
    pub async fn set_capture(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
        body: &[u8],
    ) -> Result<Rollout, ApiError> {
        self.rollout_write(who, tenant, class)?;
        let CaptureBody { selections } = parse(body)?;
        let max = self.limits.max_capture_selections;
        if selections == 0 || selections as usize > max {
            return Err(invalid(format!(
                "selections {selections} is not between 1 and {max} (`max_capture_selections`)"
            )));
        }
        self.change_class(
            tenant,
            class,
            Box::new(move |_, a| {
                a.capture = Some(selections);
                Ok(())
            }),
        )
        .await
    }

    /// `DELETE /v1/tenants/{tenant}/classes/{class}/capture`: stops capturing and forgets
    /// what was captured.
    pub async fn clear_capture(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
    ) -> Result<Rollout, ApiError> {
        self.rollout_write(who, tenant, class)?;
        let answer = self
            .change_class(
                tenant,
                class,
                Box::new(|_, a| {
                    a.capture = None;
                    Ok(())
                }),
            )
            .await?;
        if let Some(trials) = self.trials.get(tenant, class) {
            trials.clear_capture();
        }
        Ok(answer)
    }

    /// The class's assignment as committed, for a read by the tenant or the admin.
    fn class_read(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
    ) -> Result<(Arc<TenantRecord>, Assignment), ApiError> {
        require_tenant(who, tenant)?;
        let snapshot = self.snapshot();
        let record =
            snapshot.manifest().tenants.get(tenant).cloned().ok_or_else(|| unknown_tenant(tenant))?;
        let a = record.classes.get(class).cloned().ok_or_else(|| unknown_class(tenant, class))?;
        Ok((record, a))
    }

    /// `GET /v1/tenants/{tenant}/classes/{class}/capture`: the captured selections, a
    /// trace line each, oldest first (`switchyard replay` reads it).
    pub fn captured(&self, who: &Principal, tenant: &str, class: &str) -> Result<Vec<u8>, ApiError> {
        self.class_read(who, tenant, class)?;
        Ok(self.trials.get(tenant, class).map(|t| t.captured()).unwrap_or_default())
    }

    /// `GET /v1/tenants/{tenant}/classes/{class}/shadow`: this replica's comparison.
    pub fn shadow_report(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
    ) -> Result<ShadowReport, ApiError> {
        let (record, a) = self.class_read(who, tenant, class)?;
        let mut report = ShadowReport {
            tenant: tenant.into(),
            class: class.into(),
            live: live(&record, &a),
            shadow: a.shadow.clone(),
            sampled: 0,
            dropped: Default::default(),
            faults: Default::default(),
            comparison: switchyard::selection::compare::Tally::new(0).summary(),
            latency: Default::default(),
            disagreements: Vec::new(),
        };
        if let Some(trials) = self.trials.get(tenant, class) {
            trials.shadow_report(&mut report);
        }
        Ok(report)
    }

    /// `GET /v1/tenants/{tenant}/classes/{class}/canary`: the canary and this replica's
    /// count of it.
    pub fn canary_status(
        &self,
        who: &Principal,
        tenant: &str,
        class: &str,
    ) -> Result<CanaryStatus, ApiError> {
        let (record, a) = self.class_read(who, tenant, class)?;
        let (selections, faults) =
            self.trials.get(tenant, class).map_or((0, 0), |t| t.canary_counts(a.canary.as_ref()));
        Ok(CanaryStatus {
            tenant: tenant.into(),
            class: class.into(),
            live: live(&record, &a),
            canary: a.canary.clone(),
            selections,
            faults,
            last_canary: a.last_canary.clone(),
        })
    }
}
