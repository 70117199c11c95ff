//! A policy's versions: one compiled and configured ([`LoadedPolicy`]), and the one an
//! instance runs now ([`LivePolicy`]), swapped when a followed source moves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use dynamo_kv_router::plugins::worker_selection::WorkerInputs as DynamoInputs;
use switchyard::selection::Scorer;
use switchyard::{
    FailMode, GuardConfig, GuardedSelector, GuestScorer, LoadError, LoadErrorKind, PolicyComponent,
    PolicyEngine, SharedBreaker,
};
use switchyard_guest_sdk::{InputGroups, PolicyInfo};

use crate::config::{ConfigError, SwitchyardConfig};

/// The adapter's one compile at a time, across every instance and follower in this
/// process: a router compiles on its own cores, and followers of many partitions must
/// not take them all. Held by the compile until Cranelift returns (in-process it cannot
/// be interrupted), even past its deadline.
struct CompilePermit;

/// Why a version was not built.
pub(crate) struct BuildError {
    pub(crate) kind: LoadErrorKind,
    pub(crate) message: String,
    /// Refused waiting for the compile permit: the version itself may be fine, and is
    /// worth trying again once the compile ahead of it has ended.
    pub(crate) busy: bool,
}

impl From<LoadError> for BuildError {
    fn from(e: LoadError) -> Self {
        Self { kind: e.kind, message: e.to_string(), busy: false }
    }
}

static COMPILING: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

impl CompilePermit {
    /// The permit, waiting for it at most `compile_timeout_ms` (then refused
    /// `compile-timeout`: the compile ahead of this one has outlived its own deadline).
    fn take(engine: &PolicyEngine) -> Result<Self, BuildError> {
        let wait = std::time::Duration::from_millis(engine.limits().compile_timeout_ms);
        let (lock, freed) = &COMPILING;
        let busy = lock.lock().unwrap_or_else(|p| p.into_inner());
        let (mut busy, waited) =
            freed.wait_timeout_while(busy, wait, |busy| *busy).unwrap_or_else(|p| p.into_inner());
        if waited.timed_out() && *busy {
            return Err(BuildError {
                kind: LoadErrorKind::CompileTimeout,
                message: format!(
                    "another compile held the adapter's compile permit for over {} ms",
                    wait.as_millis()
                ),
                busy: true,
            });
        }
        *busy = true;
        Ok(Self)
    }
}

impl Drop for CompilePermit {
    fn drop(&mut self) {
        let (lock, freed) = &COMPILING;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = false;
        freed.notify_one();
    }
}

/// One version of a policy, compiled and configured once, from which every partition's
/// picker (or scorer) gets a sibling instance.
pub struct LoadedPolicy {
    name: String,
    /// The configured guest's template: configured once (so a bad `params` is refused
    /// then), holding no instance. Behind a lock only because a scorer is not `Sync` and
    /// Dynamo's factory must be; it is taken once per picker made.
    guest: Mutex<GuestScorer>,
    pub(crate) info: PolicyInfo,
    fail_mode: FailMode,
    guard_config: GuardConfig,
    breaker: Arc<SharedBreaker>,
    /// The instance's `temperature`, for [`LoadedPolicy::factory`].
    pub(crate) temperature: Option<f64>,
}

impl LoadedPolicy {
    /// Compiles, instantiates and configures `config`'s policy from its bytes (`name`
    /// names it in faults); each failure names the field at fault.
    pub fn from_bytes(
        config: &SwitchyardConfig,
        engine: &PolicyEngine,
        bytes: &[u8],
        name: String,
    ) -> Result<Arc<Self>, ConfigError> {
        let version = Version { name, params: config.params(), fail_mode: config.fail_mode() };
        Self::build(engine, bytes, version, config.guard(), config.temperature()).map_err(|e| {
            let field = if e.kind == LoadErrorKind::ConfigureFailed { "params" } else { "policy.file" };
            ConfigError::new(field, e.message)
        })
    }

    pub(crate) fn build(
        engine: &PolicyEngine,
        bytes: &[u8],
        version: Version<'_>,
        guard: &GuardConfig,
        temperature: Option<f64>,
    ) -> Result<Arc<Self>, BuildError> {
        let permit = CompilePermit::take(engine)?;
        let component = PolicyComponent::load_holding(engine, bytes, permit)?;
        let guest = GuestScorer::new(version.name.clone(), component, version.params)?;
        let info = guest.info();
        Ok(Arc::new(Self {
            name: version.name,
            // Only a template: the configured instance goes (its pool slot and memory with
            // it); each picker's sibling instantiates on its first selection.
            guest: Mutex::new(guest.sibling()),
            info,
            fail_mode: version.fail_mode,
            guard_config: guard.clone(),
            breaker: Arc::new(SharedBreaker::new(guard.clone())),
            temperature,
        }))
    }

    /// The same compiled and configured guest under another name and fault mode, with a
    /// breaker of its own: what another tenant running the same bytes with the same
    /// parameters gets, without a second compile, and without sharing a quarantine.
    pub(crate) fn fork(&self, name: String, fail_mode: FailMode) -> Arc<Self> {
        Arc::new(Self {
            name,
            guest: Mutex::new(self.guest.lock().unwrap_or_else(|p| p.into_inner()).sibling()),
            info: self.info,
            fail_mode,
            guard_config: self.guard_config.clone(),
            breaker: Arc::new(SharedBreaker::new(self.guard_config.clone())),
            temperature: self.temperature,
        })
    }

    /// How faults name this version.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the policy declared: the inputs it reads, whether it filters, whether it
    /// wants commits.
    pub fn info(&self) -> PolicyInfo {
        self.info
    }

    /// What a fault does.
    pub fn fail_mode(&self) -> FailMode {
        self.fail_mode
    }

    /// A sibling instance of the guest (created on its first selection), guarded with the
    /// native default as fallback, behind this version's shared breaker.
    pub(crate) fn guard(&self) -> GuardedSelector {
        let guest = self.guest.lock().unwrap_or_else(|p| p.into_inner()).sibling();
        switchyard_builtins::guarded(Box::new(guest), self.fail_mode, self.guard_config.clone())
            .with_breaker(Arc::clone(&self.breaker))
    }

    /// The Dynamo inputs a component running this version declares: the guest's groups,
    /// and in fail-open mode the fallback's (the native default reads all three), so it
    /// can decide.
    pub(crate) fn inputs(&self) -> DynamoInputs {
        let groups = match self.fail_mode {
            FailMode::Open => self.info.inputs | InputGroups::ALL,
            FailMode::Closed => self.info.inputs,
        };
        let mut inputs = DynamoInputs::NONE;
        if groups.contains(InputGroups::CACHE) {
            inputs = inputs | DynamoInputs::CACHE;
        }
        if groups.contains(InputGroups::LOAD) {
            inputs = inputs | DynamoInputs::LOAD;
        }
        if groups.contains(InputGroups::AFFINITY) {
            inputs = inputs | DynamoInputs::PREFERRED_TAINT;
        }
        inputs
    }
}

/// What one version runs with.
pub(crate) struct Version<'a> {
    pub(crate) name: String,
    pub(crate) params: &'a str,
    pub(crate) fail_mode: FailMode,
}

/// The policy a `switchyard` instance runs now: one [`LoadedPolicy`], replaced (for a
/// store source) when the followed class moves to another version. A picker checks the
/// generation (one atomic load) per selection and takes a sibling of the new version
/// when it moved; the selection in flight finishes on the old one.
pub struct LivePolicy {
    current: RwLock<(u64, Arc<LoadedPolicy>)>,
    generation: AtomicU64,
    /// What every picker declares to Dynamo, fixed when Dynamo builds the policy: a
    /// followed source declares all three groups, since a later version may read them.
    pub(crate) inputs: DynamoInputs,
    pub(crate) temperature: Option<f64>,
    pub(crate) followed: bool,
    /// Why the last change of a followed source was not taken, if it was not.
    last_error: Mutex<Option<String>>,
}

impl LivePolicy {
    /// A policy that never changes.
    pub fn fixed(policy: Arc<LoadedPolicy>) -> Arc<Self> {
        let inputs = policy.inputs();
        let temperature = policy.temperature;
        Self::new(policy, inputs, temperature, false)
    }

    pub(crate) fn new(
        policy: Arc<LoadedPolicy>,
        inputs: DynamoInputs,
        temperature: Option<f64>,
        followed: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new((0, policy)),
            generation: AtomicU64::new(0),
            inputs,
            temperature,
            followed,
            last_error: Mutex::new(None),
        })
    }

    /// The version running now.
    pub fn current(&self) -> Arc<LoadedPolicy> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()).1)
    }

    /// How many times the version was replaced.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Why the last change seen in a followed store was not taken (the version before it
    /// keeps running); `None` once a change is taken.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_error(&self, error: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
    }

    /// Makes `next` the running version.
    pub(crate) fn swap(&self, next: Arc<LoadedPolicy>) {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let generation = current.0 + 1;
        *current = (generation, next);
        self.generation.store(generation, Ordering::Release);
    }

    /// The running version and its generation.
    pub(crate) fn now(&self) -> (u64, Arc<LoadedPolicy>) {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        (current.0, Arc::clone(&current.1))
    }

    /// The running version and its generation, if it is not `seen`.
    pub(crate) fn changed_since(&self, seen: u64) -> Option<(u64, Arc<LoadedPolicy>)> {
        (self.generation() != seen).then(|| self.now())
    }
}
