//! Limits from `--config switchyard.toml` (`[limits]`, `[guard]`, `[cache]`, and
//! `[service]` and `[registry]` for `serve`) and flags; flags win.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::Deserialize;
use switchyard::artifact_cache::ArtifactKey;
use switchyard::selection::wire::ErrorKind;
use switchyard::{ArtifactCache, Budget, Compiler, GuardConfig, Limits, PolicyEngine};
use switchyard_service::{RegistryOptions, ServiceLimits};

use crate::output::CliError;

#[derive(Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// A TOML file whose `[limits]` table overrides the defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// CPU budget per guest call: fuel, epoch, both or none.
    #[arg(long, value_parser = parse_budget)]
    pub budget: Option<Budget>,
    /// Fuel per call regardless of batch size.
    #[arg(long)]
    pub fuel_base: Option<u64>,
    /// Extra fuel per unit of work (candidate row or prefix hash).
    #[arg(long, alias = "fuel-per-candidate")]
    pub fuel_per_unit: Option<u64>,
    /// The hard ceiling on one guest call's fuel, whatever the request.
    #[arg(long)]
    pub max_fuel_per_call: Option<u64>,
    /// Wall-clock deadline per call with the epoch or both budgets, ms.
    #[arg(long)]
    pub call_deadline_ms: Option<u64>,
    /// Linear memory per instance, bytes.
    #[arg(long)]
    pub max_memory_bytes: Option<usize>,
    /// Largest component accepted, bytes.
    #[arg(long)]
    pub max_component_bytes: Option<usize>,
    /// Wasm stack per call, bytes.
    #[arg(long)]
    pub max_wasm_stack_bytes: Option<usize>,
    /// Compile time allowed, ms.
    #[arg(long)]
    pub compile_timeout_ms: Option<u64>,
    /// The compiler: cranelift (fastest selections), winch (fastest uploads) or tiered
    /// (uploads served on Winch's code until Cranelift's replaces it, `serve` only).
    #[arg(long, value_parser = parse_compiler)]
    pub compiler: Option<Compiler>,
    /// Elements per table.
    #[arg(long)]
    pub max_table_elements: Option<usize>,
    /// Epoch tick (the deadline's resolution), ms.
    #[arg(long)]
    pub epoch_tick_ms: Option<u64>,
    /// Instances the pooling allocator holds at once.
    #[arg(long)]
    pub max_instances: Option<u32>,
    /// Consecutive faults that quarantine a policy.
    #[arg(long)]
    pub quarantine_after: Option<u32>,
    /// Selections served by the fallback before the first retry of a quarantined policy.
    #[arg(long)]
    pub backoff_initial: Option<u64>,
    /// Longest wait between retries of a quarantined policy, selections.
    #[arg(long)]
    pub backoff_max: Option<u64>,
    /// A directory (owned by the operator) to cache compiled components in. The key that
    /// seals them is `SWITCHYARD_ARTIFACT_KEY` if set, else the file `<DIR>.key` beside
    /// the directory (`<data-dir>/artifact.key` for `serve`), created on first use.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

fn parse_budget(s: &str) -> Result<Budget, String> {
    match s {
        "fuel" => Ok(Budget::Fuel),
        "epoch" => Ok(Budget::Epoch),
        "both" => Ok(Budget::Both),
        "none" => Ok(Budget::None),
        _ => Err(format!("`{s}` is not a budget; use fuel, epoch, both or none")),
    }
}

fn parse_compiler(s: &str) -> Result<Compiler, String> {
    [Compiler::Cranelift, Compiler::Winch, Compiler::Tiered]
        .into_iter()
        .find(|c| c.name() == s)
        .ok_or_else(|| format!("`{s}` is not a compiler; use cranelift, winch or tiered"))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    limits: Limits,
    /// `switchyard serve`'s own limits.
    #[serde(default)]
    service: ServiceLimits,
    #[serde(default)]
    guard: GuardConfig,
    #[serde(default)]
    cache: CacheConfig,
    /// `switchyard serve`'s registry.
    #[serde(default)]
    registry: RegistryConfig,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RegistryConfig {
    /// A fleet's registry (`nats://HOST:PORT`); absent: the data dir's.
    url: Option<String>,
    /// How long a blob no tenant names is kept on the fleet's registry, seconds.
    blob_grace_secs: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CacheConfig {
    /// Where compiled components are cached; absent: no cache.
    dir: Option<PathBuf>,
}

impl LimitArgs {
    fn file(&self) -> Result<ConfigFile, CliError> {
        let Some(path) = &self.config else {
            return Ok(ConfigFile::default());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::new(ErrorKind::Config, format!("{}: {e}", path.display())))?;
        toml::from_str::<ConfigFile>(&text)
            .map_err(|e| CliError::new(ErrorKind::Config, format!("{}: {}", path.display(), e.message())))
    }

    /// The circuit breaker's settings.
    pub fn guard(&self) -> Result<GuardConfig, CliError> {
        let mut guard = self.file()?.guard;
        if let Some(v) = self.quarantine_after {
            guard.quarantine_after = v;
        }
        if let Some(v) = self.backoff_initial {
            guard.backoff_initial = v;
        }
        if let Some(v) = self.backoff_max {
            guard.backoff_max = v;
        }
        Ok(guard)
    }

    /// The `[service]` table of the config file (defaults without one).
    pub fn service_limits(&self) -> Result<ServiceLimits, CliError> {
        Ok(self.file()?.service)
    }

    pub fn limits(&self) -> Result<Limits, CliError> {
        let mut limits = self.file()?.limits;
        macro_rules! set {
            ($($field:ident),*) => {$( if let Some(v) = self.$field { limits.$field = v; } )*};
        }
        set!(
            budget,
            fuel_base,
            fuel_per_unit,
            max_fuel_per_call,
            call_deadline_ms,
            max_memory_bytes,
            max_component_bytes,
            max_wasm_stack_bytes,
            compile_timeout_ms,
            compiler,
            max_table_elements,
            epoch_tick_ms,
            max_instances
        );
        Ok(limits)
    }

    /// The engine's limits for `serve`: [`LimitArgs::limits`], with the pool
    /// (`max_instances`) sized to what `service` may hold at once
    /// ([`ServiceLimits::instances_needed`]) unless the flag or the file sets it (an
    /// explicit pool too small for the service is refused by `serve`, naming both). A
    /// slot reserves address space, not memory: ~4 GiB of it each.
    pub fn serve_limits(&self, service: &ServiceLimits) -> Result<Limits, CliError> {
        let mut limits = self.limits()?;
        if self.max_instances.is_none() && !self.file_sets_max_instances()? {
            let needed = u32::try_from(service.instances_needed()).unwrap_or(u32::MAX);
            limits.max_instances = limits.max_instances.max(needed);
        }
        Ok(limits)
    }

    /// Whether the config file names `[limits] max_instances` itself.
    fn file_sets_max_instances(&self) -> Result<bool, CliError> {
        let Some(path) = &self.config else { return Ok(false) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::new(ErrorKind::Config, format!("{}: {e}", path.display())))?;
        let table: toml::Table = toml::from_str(&text)
            .map_err(|e| CliError::new(ErrorKind::Config, format!("{}: {}", path.display(), e.message())))?;
        Ok(table.get("limits").and_then(|l| l.get("max_instances")).is_some())
    }

    /// The fleet's registry: `url` (`--registry`) or `[registry] url`, and its blob
    /// grace (`[registry] blob_grace_secs`, at least 1).
    pub fn registry(&self, url: Option<String>) -> Result<Option<RegistryOptions>, CliError> {
        let config = self.file()?.registry;
        let Some(url) = url.or(config.url) else { return Ok(None) };
        let blob_grace = match config.blob_grace_secs {
            None => switchyard_service::registry::DEFAULT_BLOB_GRACE,
            Some(0) => {
                let why = "[registry] blob_grace_secs must be at least 1";
                return Err(CliError::new(ErrorKind::Config, why));
            }
            Some(secs) => Duration::from_secs(secs),
        };
        Ok(Some(RegistryOptions { url, blob_grace }))
    }

    /// The artifact cache directory, from `--cache-dir` or `[cache] dir`.
    pub fn cache_dir(&self) -> Result<Option<PathBuf>, CliError> {
        Ok(self.cache_dir.clone().or(self.file()?.cache.dir))
    }

    pub fn engine(&self) -> Result<PolicyEngine, CliError> {
        let engine = PolicyEngine::new(self.limits()?)
            .map_err(|e| CliError::new(ErrorKind::Engine, format!("{e:#}")))?;
        match self.cache_dir()? {
            Some(dir) => {
                let key = artifact_key(&dir)?;
                let cache = ArtifactCache::open(&dir, key).map_err(|e| {
                    CliError::new(ErrorKind::Config, format!("cache directory {}: {e}", dir.display()))
                })?;
                Ok(engine.with_artifact_cache(cache))
            }
            None => Ok(engine),
        }
    }
}

/// The key of the cache in `dir`: from `SWITCHYARD_ARTIFACT_KEY`, else the file
/// `<dir>.key` beside it (outside it: whoever can write the artifacts must not read it).
fn artifact_key(dir: &Path) -> Result<ArtifactKey, CliError> {
    let config = |why: String| CliError::new(ErrorKind::Config, why);
    if let Some(key) = ArtifactKey::from_env().map_err(|e| config(e.to_string()))? {
        return Ok(key);
    }
    let path = ArtifactKey::path_beside(dir).ok_or_else(|| {
        config(format!(
            "cache directory {}: name it by a path ending in a name (its key goes in <name>.key beside it), or set {}",
            dir.display(),
            switchyard::artifact_cache::ARTIFACT_KEY_ENV
        ))
    })?;
    ArtifactKey::from_file(&path).map_err(|e| config(format!("the cache's key: {e}")))
}
