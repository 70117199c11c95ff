//! A policy named on the command line (`--policy`, `--compare`): a builtin, native or
//! its guest build, or a component file. One loader for `select` and `replay`.

use std::path::Path;

use switchyard::selection::Scorer;
use switchyard::selection::wire::ErrorKind;
use switchyard::{GuestScorer, PolicyComponent, PolicyEngine};
use switchyard_builtins as builtin;

use crate::output::{CliError, read_file};

/// A loaded policy and what names it.
pub struct Loaded {
    /// The scorer to run.
    pub scorer: Box<dyn Scorer>,
    /// The builtin's name, or the component file's stem.
    pub name: String,
    /// `native` or `guest`.
    pub build: &'static str,
    /// sha256 of the component that runs (a guest's), else `None`.
    pub sha256: Option<String>,
    /// Whether it came from a component file (not a builtin).
    pub from_file: bool,
}

/// Loads `spec` configured with `params`: a component file when it ends in `.wasm` or
/// names a file, else a builtin (its guest build with `guest`). `engine` is called only
/// when a component is to run.
pub fn load_policy(
    spec: &str,
    guest: bool,
    params: &str,
    engine: &mut dyn FnMut() -> Result<PolicyEngine, CliError>,
) -> Result<Loaded, CliError> {
    let path = Path::new(spec);
    if spec.ends_with(".wasm") || path.is_file() {
        let bytes = read_file(path)?;
        let component = PolicyComponent::load(&engine()?, &bytes)?;
        let sha256 = Some(component.digest().to_string());
        let name = path.file_stem().map_or("policy".into(), |s| s.to_string_lossy().into_owned());
        let scorer = GuestScorer::new(name.clone(), component, params)?;
        return Ok(Loaded { scorer: Box::new(scorer), name, build: "guest", sha256, from_file: true });
    }
    let builtin = builtin::find(spec).ok_or_else(|| {
        CliError::new(
            ErrorKind::UnknownPolicy,
            format!("`{spec}` is neither a builtin ({}) nor a .wasm file", builtin::names().join(", ")),
        )
    })?;
    let name = builtin.name.to_string();
    if guest {
        let scorer = builtin.guest(&engine()?, params)?;
        let sha256 = Some(scorer.component().digest().to_string());
        Ok(Loaded { scorer: Box::new(scorer), name, build: "guest", sha256, from_file: false })
    } else {
        let scorer =
            builtin.native(params).map_err(|e| CliError::new(ErrorKind::ConfigureFailed, e.to_string()))?;
        Ok(Loaded { scorer, name, build: "native", sha256: None, from_file: false })
    }
}
