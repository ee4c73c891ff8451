//! `Mcp-Param-{Name}` headers (MCP 2026-07-28, "Custom Headers from Tool Parameters"): which
//! parameters a tool's `inputSchema` mirrors into headers (`x-mcp-header`), and whether a
//! `tools/call`'s headers say what its arguments say — the Base64 sentinel decoded, integers
//! compared as numbers. Pure: a schema, the arguments and the headers in, a decision out.

use serde_json::Value;

use crate::mcp::{self, Mismatch};

/// The prefix of a mirrored parameter's header name, as `http` spells names (lower case).
pub(crate) const PREFIX: &str = "mcp-param-";

/// One parameter a tool mirrors into a header: its `x-mcp-header` name and where it lies in the
/// arguments (the chain of `properties` keys from the schema's root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamHeader {
    pub(crate) name: String,
    pub(crate) path: Vec<String>,
}

/// Whether `name` is an HTTP field-name token (`1*tchar`, RFC 9110 §5.1).
pub(crate) fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Every `x-mcp-header` of `schema` statically reachable through `properties` keys (the only
/// places the specification allows it); a name that is not a token is left out (the tool is
/// then checked without it: clients must reject such a tool anyway).
pub(crate) fn declared(schema: &Value) -> Vec<ParamHeader> {
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), &mut found);
    found
}

/// The depth past which nested `properties` are not followed.
const MAX_DEPTH: usize = 16;

fn walk(schema: &Value, path: &mut Vec<String>, found: &mut Vec<ParamHeader>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    if path.len() >= MAX_DEPTH {
        return;
    }
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get("x-mcp-header").and_then(Value::as_str)
            && is_token(name)
        {
            found.push(ParamHeader {
                name: name.to_owned(),
                path: path.clone(),
            });
        }
        walk(property, path, found);
        path.pop();
    }
}

/// Checks the `Mcp-Param-*` headers of a call against its `arguments`, for each declared
/// parameter: a value in the body needs its header (exactly one line), saying the same after
/// decoding; no value (absent or `null`) means no header. `header(name)` gives the lines of
/// `Mcp-Param-{name}` (names compare case-insensitively).
pub(crate) fn check<'h>(
    declared: &[ParamHeader],
    arguments: Option<&Value>,
    header: impl Fn(&str) -> Vec<&'h [u8]>,
) -> Result<(), Mismatch> {
    for param in declared {
        let value = arguments
            .and_then(|args| param.path.iter().try_fold(args, |v, key| v.get(key)))
            .filter(|v| !v.is_null());
        let lines = header(&param.name);
        let header_name = || clip(&format!("Mcp-Param-{}", param.name));
        match (value, lines.as_slice()) {
            (None, []) => {}
            (Some(_), []) => {
                return Err(Mismatch::ParamMissing {
                    header: header_name(),
                });
            }
            (_, [_, _, ..]) => {
                return Err(Mismatch::ParamRepeated {
                    header: header_name(),
                });
            }
            (value, [sent]) => {
                let decoded = decode(sent);
                if !value.is_some_and(|v| decoded.as_deref().is_some_and(|d| same(d, v))) {
                    return Err(Mismatch::ParamDiffers {
                        header: header_name(),
                        header_value: clip(
                            &decoded.unwrap_or_else(|| String::from_utf8_lossy(sent).into_owned()),
                        ),
                        body_value: clip(&value.map_or_else(String::new, Value::to_string)),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The client's text in a refusal, cut to [`crate::logging::MAX_NAME_BYTES`].
fn clip(s: &str) -> String {
    crate::logging::clip(s, crate::logging::MAX_NAME_BYTES).into_owned()
}

/// A header value decoded: the sentinel form's Base64, or the plain value as sent — which must
/// be visible ASCII, spaces and tabs (RFC 9110 field value), else it is invalid (`None`).
fn decode(sent: &[u8]) -> Option<String> {
    let plain = sent
        .iter()
        .all(|&b| b == b'\t' || (0x20..=0x7e).contains(&b));
    if !plain {
        return None;
    }
    mcp::decode_header(sent)
}

/// Whether a header's decoded text says the body's value: strings exactly, booleans as
/// `true`/`false`, numbers numerically (`42.0` is `42`).
fn same(text: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => s == text,
        Value::Bool(b) => text == if *b { "true" } else { "false" },
        Value::Number(n) => {
            if let (Some(a), Ok(b)) = (n.as_i64(), text.parse::<i64>()) {
                return a == b;
            }
            match (n.as_f64(), text.parse::<f64>()) {
                (Some(a), Ok(b)) => a == b,
                _ => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "shard": {"type": "integer", "x-mcp-header": "Shard"},
            "query": {"type": "string"},
            "opts": {"type": "object", "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}}},
            "bad": {"type": "string", "x-mcp-header": "no spaces"},
            "list": {"type": "array", "items": {"x-mcp-header": "Item"}},
        }})
    }

    fn headers(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Vec<&'static [u8]> {
        move |name: &str| {
            pairs
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes())
                .collect()
        }
    }

    #[test]
    fn only_properties_chains_declare_headers() {
        let mut names: Vec<String> = declared(&schema()).into_iter().map(|p| p.name).collect();
        names.sort();
        assert_eq!(names, ["Flag", "Region", "Shard"]);
        let flag = declared(&schema())
            .into_iter()
            .find(|p| p.name == "Flag")
            .unwrap();
        assert_eq!(flag.path, ["opts", "flag"]);
    }

    #[test]
    fn headers_must_say_what_the_arguments_say() {
        let d = declared(&schema());
        let args = json!({"region": "us-west1", "shard": 42, "opts": {"flag": true}, "query": "q"});
        let ok: &[(&str, &str)] = &[("Region", "us-west1"), ("shard", "42.0"), ("FLAG", "true")];
        assert_eq!(check(&d, Some(&args), headers(ok)), Ok(()));
        // The sentinel form decoded.
        let b64: &[(&str, &str)] = &[
            ("Region", "=?base64?dXMtd2VzdDE=?="),
            ("Shard", "42"),
            ("Flag", "true"),
        ];
        assert_eq!(check(&d, Some(&args), headers(b64)), Ok(()));
        for bad in [
            &[("Region", "us-east1"), ("Shard", "42"), ("Flag", "true")][..],
            &[("Region", "us-west1"), ("Shard", "43"), ("Flag", "true")],
            &[("Region", "us-west1"), ("Shard", "42"), ("Flag", "false")],
            &[("Region", "us-west1"), ("Shard", "42")],
            &[
                ("Region", "us-west1"),
                ("Region", "us-west1"),
                ("Shard", "42"),
                ("Flag", "true"),
            ],
        ] {
            let leaked: &'static [(&'static str, &'static str)] =
                Box::leak(bad.to_vec().into_boxed_slice());
            assert!(check(&d, Some(&args), headers(leaked)).is_err(), "{bad:?}");
        }
        // No value (absent or null): no header expected, and one sent is a mismatch.
        let sparse = json!({"region": "eu", "shard": null});
        assert_eq!(
            check(&d, Some(&sparse), headers(&[("Region", "eu")])),
            Ok(())
        );
        assert!(
            check(
                &d,
                Some(&sparse),
                headers(&[("Region", "eu"), ("Shard", "1")])
            )
            .is_err()
        );
        assert_eq!(check(&d, None, headers(&[])), Ok(()));
    }

    #[test]
    fn a_value_outside_the_field_value_characters_is_invalid() {
        let d = declared(&schema());
        let args = json!({"region": "caf\u{e9}"});
        assert!(check(&d, Some(&args), headers(&[("Region", "caf\u{e9}")])).is_err());
        assert_eq!(
            check(
                &d,
                Some(&args),
                headers(&[("Region", "=?base64?Y2Fmw6k=?=")])
            ),
            Ok(())
        );
    }
}
