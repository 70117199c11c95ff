//! Typed policy parameters from the tenant's JSON.

use serde::de::DeserializeOwned;

use crate::{PolicyError, check, json};

/// Parses a policy's parameters. Empty input or `null` means `{}` (all defaults); any
/// other JSON that is not an object is refused.
///
/// Use `#[serde(deny_unknown_fields, default)]` on the parameters struct: an unknown
/// field is then an error naming it, and a value of the wrong type names its field too.
/// Either error says where, from the top of the parameters, in the shape of the range
/// checks ([`check`]): ``field `classes.gold.prefill_load_scale`: invalid type: …``.
pub fn parse_parameters<P: DeserializeOwned>(json: &str) -> Result<P, PolicyError> {
    // One pass that records the path to the failing value as it descends.
    json::from_value(read(json)?).map_err(|(path, error)| refusal(&path, &error))
}

/// The parameters as a JSON object. Not generic, so every policy type shares it.
fn read(json: &str) -> Result<json::Value, PolicyError> {
    let json = json.trim();
    let json = if json.is_empty() || json == "null" { "{}" } else { json };
    // Parsed as a `Value` first: a duplicate key keeps its last value (a struct read
    // straight from the text would refuse it), and the object check needs no second
    // parse (serde would otherwise read a struct from an array, positionally).
    let value = json::parse(json)
        .map_err(|e| PolicyError::invalid_parameters(format!("parameters are not JSON: {e}")))?;
    if !matches!(value, json::Value::Object(_)) {
        return Err(PolicyError::invalid_parameters("parameters must be a JSON object"));
    }
    Ok(value)
}

/// A reading error as the tenant sees it: named by its path unless it is about the whole.
fn refusal(path: &str, error: &json::Error) -> PolicyError {
    if path.is_empty() {
        PolicyError::invalid_parameters(error.to_string())
    } else {
        check::field(path, error)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::parse_parameters;
    use crate::ErrorKind;

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Row {
        weight: f64,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Params {
        blocks: u32,
        factor: f64,
        row: Row,
        rows: BTreeMap<String, Row>,
    }

    fn error(json: &str) -> String {
        let e = parse_parameters::<Params>(json).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParameters, "{json}");
        e.message
    }

    #[test]
    fn nothing_and_null_mean_the_defaults() {
        for json in ["", "  \n", "null", " null ", "{}"] {
            assert_eq!(parse_parameters::<Params>(json).unwrap(), Params::default(), "{json:?}");
        }
        let p: Params = parse_parameters(r#"{"blocks": 4, "rows": {"a": {"weight": 2}}}"#).unwrap();
        assert_eq!((p.blocks, p.rows["a"].weight), (4, 2.0));
    }

    #[test]
    fn only_an_object_is_parameters() {
        for json in ["[1, 2.5]", "3", r#""x""#, "true"] {
            assert_eq!(error(json), "parameters must be a JSON object", "{json}");
        }
        assert!(error("{").starts_with("parameters are not JSON: "));
    }

    #[test]
    fn a_duplicate_key_keeps_its_last_value_as_before() {
        let p: Params = parse_parameters(r#"{"blocks": 1, "blocks": 2}"#).unwrap();
        assert_eq!(p.blocks, 2);
    }

    #[test]
    fn an_unknown_field_is_named() {
        let message = error(r#"{"blocks": 1, "bogus": 1}"#);
        assert!(message.starts_with("field `bogus`: unknown field `bogus`"), "{message}");
        assert!(error(r#"{"row": {"wieght": 1}}"#).starts_with("field `row.wieght`: unknown field"));
    }

    #[test]
    fn a_type_error_names_the_whole_path() {
        assert_eq!(error(r#"{"factor": "x"}"#), "field `factor`: invalid type: string \"x\", expected f64");
        // The nested field is named, not just the top-level field that holds it.
        assert_eq!(
            error(r#"{"row": {"weight": true}}"#),
            "field `row.weight`: invalid type: boolean `true`, expected f64"
        );
        assert_eq!(
            error(r#"{"rows": {"gold": {"weight": []}}}"#),
            "field `rows.gold.weight`: invalid type: sequence, expected f64"
        );
    }

    #[test]
    fn with_two_bad_fields_the_first_is_still_named() {
        // No single field's removal fixes this parse; the first bad one is named all the same.
        let message = error(r#"{"blocks": "many", "factor": "x"}"#);
        assert!(message.starts_with("field `blocks`: invalid type: string \"many\""), "{message}");
    }
}
