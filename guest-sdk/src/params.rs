//! Typed policy parameters from the tenant's JSON.

use serde::de::DeserializeOwned;

use crate::PolicyError;

/// Parses a policy's parameters. Empty input or `null` means `{}` (all defaults).
///
/// Use `#[serde(deny_unknown_fields, default)]` on the parameters struct: an unknown
/// field is then an error naming it, and a value of the wrong type names its field too.
pub fn parse_parameters<P: DeserializeOwned>(json: &str) -> Result<P, PolicyError> {
    let json = json.trim();
    let json = if json.is_empty() || json == "null" { "{}" } else { json };
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| PolicyError::invalid_parameters(format!("parameters are not JSON: {e}")))?;
    let serde_json::Value::Object(map) = value else {
        return Err(PolicyError::invalid_parameters("parameters must be a JSON object"));
    };
    // Deserialize field by field first, so a type error names the field it is in.
    let fields: Vec<String> = map.keys().cloned().collect();
    let whole = serde_json::Value::Object(map);
    serde_json::from_value::<P>(whole.clone()).map_err(|e| {
        let message = e.to_string();
        if message.contains("unknown field") {
            return PolicyError::invalid_parameters(message);
        }
        let culprit = fields.iter().find(|field| {
            let mut without = whole.clone();
            if let serde_json::Value::Object(m) = &mut without {
                m.remove(*field);
            }
            serde_json::from_value::<P>(without).is_ok()
        });
        match culprit {
            Some(field) => PolicyError::invalid_parameters(format!("field `{field}`: {message}")),
            None => PolicyError::invalid_parameters(message),
        }
    })
}
