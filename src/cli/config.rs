//! Limits from `--config switchyard.toml` (`[limits]`, and `[service]` for `serve`) and
//! flags; flags win.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;
use switchyard::{Budget, Limits, PolicyEngine};
use switchyard_service::ServiceLimits;

use super::CliError;

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
    /// Extra fuel per candidate.
    #[arg(long)]
    pub fuel_per_candidate: Option<u64>,
    /// Wall-clock deadline per call with the epoch budget, ms.
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    limits: Limits,
    /// `switchyard serve`'s own limits.
    #[serde(default)]
    service: ServiceLimits,
}

impl LimitArgs {
    fn file(&self) -> Result<ConfigFile, CliError> {
        match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| CliError::new("config", format!("{}: {e}", path.display())))?;
                toml::from_str::<ConfigFile>(&text)
                    .map_err(|e| CliError::new("config", format!("{}: {e}", path.display())))
            }
            None => Ok(ConfigFile::default()),
        }
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
            fuel_per_candidate,
            call_deadline_ms,
            max_memory_bytes,
            max_component_bytes,
            max_wasm_stack_bytes,
            compile_timeout_ms
        );
        Ok(limits)
    }

    pub fn engine(&self) -> Result<PolicyEngine, CliError> {
        PolicyEngine::new(self.limits()?).map_err(|e| CliError::new("engine", format!("{e:#}")))
    }
}
