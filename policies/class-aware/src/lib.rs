//! Policy-class-aware selection: a class → parameter table over Dynamo's default cost.
//! No published router (Dynamo, SGLang's router, GIE/llm-d) keys the worker choice on a
//! class directly, but Dynamo's per-request `RouterConfigOverride` gives each
//! class its own weights; a table lookup on `policy-class` expresses exactly that.
//!
//! Built-in table (each row is a full set of `default` policy parameters):
//! - `latency`: strong cache affinity: `prefill_load_scale` 2, so every uncached prefill
//!   block costs twice a decode block and a prefix hit pulls harder;
//! - `batch`: balance load: no cache credit on any tier (`overlap_score_credit`,
//!   `host_cache_hit_weight`, `disk_cache_hit_weight` 0), so the cost is the total
//!   prefill + decode load;
//! - any other class, or none: the `default` row (Dynamo's defaults).
//!
//! Giving `classes` replaces the whole table; giving `default` replaces the default row.

use std::collections::BTreeMap;

use serde::Deserialize;
use switchyard_guest_sdk::{
    Candidates, InputGroups, Policy, PolicyError, PolicyInfo, Request, check, parse_parameters,
};
use switchyard_policy_default::{DefaultPolicy, Parameters as Row};

/// The tenant-settable parameters: the table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameters {
    /// Class name → the default policy's parameters for requests of that class.
    pub classes: BTreeMap<String, Row>,
    /// The parameters for a request of no class, or of a class not in `classes`.
    pub default: Row,
}

impl Default for Parameters {
    fn default() -> Self {
        let latency = Row { prefill_load_scale: 2.0, ..Row::default() };
        let batch = Row {
            overlap_score_credit: 0.0,
            host_cache_hit_weight: 0.0,
            disk_cache_hit_weight: 0.0,
            ..Row::default()
        };
        Self {
            classes: BTreeMap::from([("latency".into(), latency), ("batch".into(), batch)]),
            default: Row::default(),
        }
    }
}

/// Dynamo's cost with per-class parameters.
#[derive(Debug, Clone)]
pub struct ClassAware {
    classes: BTreeMap<String, DefaultPolicy>,
    default: DefaultPolicy,
}

impl ClassAware {
    /// Validates every row; an error names the row and the field.
    pub fn new(params: Parameters) -> Result<Self, PolicyError> {
        let row = |path: &str, row: Row| DefaultPolicy::new(row).map_err(|e| check::nested(path, e));
        let mut classes = BTreeMap::new();
        for (name, params) in params.classes {
            let policy = row(&format!("classes.{name}"), params)?;
            classes.insert(name, policy);
        }
        Ok(Self { classes, default: row("default", params.default)? })
    }

    /// The row a class maps to (the default row for none or an unknown class).
    pub fn row(&self, class: Option<&str>) -> &DefaultPolicy {
        class.and_then(|c| self.classes.get(c)).unwrap_or(&self.default)
    }
}

impl Policy for ClassAware {
    fn configure(parameters: &str) -> Result<Self, PolicyError> {
        Self::new(parse_parameters(parameters)?)
    }

    fn info(&self) -> PolicyInfo {
        PolicyInfo {
            inputs: InputGroups::CACHE | InputGroups::LOAD | InputGroups::AFFINITY,
            filters: false,
            wants_commits: false,
        }
    }

    fn score(
        &mut self,
        request: &Request<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), PolicyError> {
        let class = request.policy_class();
        let row = match class.as_deref().and_then(|c| self.classes.get_mut(c)) {
            Some(row) => row,
            None => &mut self.default,
        };
        row.score(request, candidates, costs)
    }
}

switchyard_guest_sdk::export_policy!(ClassAware);

#[cfg(test)]
mod tests {
    use switchyard_guest_sdk::Column;
    use switchyard_guest_sdk::Policy;
    use switchyard_guest_sdk::testing::Case;

    use super::ClassAware;

    /// Worker 0 holds the whole 1024-token prompt but is busier; worker 1 is cold and idle.
    fn case(class: Option<&str>) -> Case {
        let mut case = Case::new(2).prompt(1024);
        case[Column::DeviceOverlapBlocks] = vec![64, 0];
        case[Column::CachedTokens] = vec![1024, 0];
        case[Column::ActivePrefillTokens] = vec![1024, 0];
        case[Column::DecodeBlocks] = vec![200, 100];
        case.lazy.policy_class = class.map(str::to_string);
        case
    }

    #[test]
    fn the_table_maps_each_class_to_its_row() {
        let mut policy = ClassAware::configure("{}").unwrap();
        // prefill blocks: w0 (1024 + 0 + 1024)/16 = 128, w1 64.
        // latency: 2·max(0, 128 − 64) + 200 = 328 vs 2·64 + 100 = 228.
        assert_eq!(case(Some("latency")).costs(&mut policy).unwrap(), vec![328.0, 228.0]);
        // default: 64 + 200 = 264 vs 64 + 100 = 164.
        assert_eq!(case(None).costs(&mut policy).unwrap(), vec![264.0, 164.0]);
        assert_eq!(case(Some("gold")).costs(&mut policy).unwrap(), vec![264.0, 164.0], "unknown → default");
        // batch: no credit: 128 + 200 = 328 vs 164.
        assert_eq!(case(Some("batch")).costs(&mut policy).unwrap(), vec![328.0, 164.0]);
    }

    #[test]
    fn a_tenant_table_replaces_the_builtin_one() {
        let params =
            r#"{"classes": {"gold": {"prefill_load_scale": 10}}, "default": {"prefill_load_scale": 0}}"#;
        let mut policy = ClassAware::configure(params).unwrap();
        // gold: 10·64 + 200 = 840 vs 10·64 + 100 = 740; latency now falls to the default row.
        assert_eq!(case(Some("gold")).costs(&mut policy).unwrap(), vec![840.0, 740.0]);
        assert_eq!(case(Some("latency")).costs(&mut policy).unwrap(), vec![200.0, 100.0]);
    }

    #[test]
    fn errors_name_the_row_and_the_field() {
        let err = ClassAware::configure(r#"{"classes": {"gold": {"overlap_score_credit": 3}}}"#).unwrap_err();
        assert!(
            err.message.contains("classes.gold") && err.message.contains("overlap_score_credit"),
            "{err}"
        );
        let err = ClassAware::configure(r#"{"default": {"bogus": 1}}"#).unwrap_err();
        assert!(err.message.contains("bogus"), "{err}");
        let err = ClassAware::configure(r#"{"tiers": {}}"#).unwrap_err();
        assert!(err.message.contains("tiers"), "{err}");
    }
}
