//! A strict validator for the subset of OpenAPI 3.1 (JSON Schema 2020-12) that utoipa emits:
//! `$ref`, `type` (one or several, `null` included), `properties`, `required`,
//! `additionalProperties`, `items`, `oneOf`, `anyOf`, `allOf`, `enum`, number and length bounds
//! and the `date-time`, `int32` and `int64` formats.
//!
//! Strict where a general validator is lenient, so that drift shows in both directions: an
//! object schema with `properties` refuses every other key unless it says
//! `additionalProperties` (a field the server sends but the document does not describe fails),
//! and a keyword it does not know is an error rather than silently ignored (a check never
//! passes because it was skipped). Written here rather than taken from a crate: the subset is
//! small, and the strictness is the point.

use std::collections::BTreeSet;

use serde_json::Value;

/// Keywords that only annotate: they constrain nothing.
const ANNOTATIONS: [&str; 9] = [
    "description",
    "title",
    "example",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
];

/// Validates values against the schemas of one OpenAPI document (which `$ref`s resolve in).
pub struct Validator<'a> {
    doc: &'a Value,
}

impl<'a> Validator<'a> {
    pub fn new(doc: &'a Value) -> Validator<'a> {
        Validator { doc }
    }

    /// The value a local reference (`#/components/schemas/Fix`) points at.
    pub fn resolve(&self, reference: &str) -> &'a Value {
        let pointer = reference
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("only local references are expected: {reference}"));
        self.doc
            .pointer(pointer)
            .unwrap_or_else(|| panic!("dangling reference {reference}"))
    }

    /// Every way `value` breaks `schema`, each naming where (`$.reproductions[0].gpu`).
    pub fn errors(&self, schema: &Value, value: &Value) -> Vec<String> {
        let mut errors = Vec::new();
        self.check(schema, value, "$", &BTreeSet::new(), &mut errors);
        errors
    }

    /// Panics with every error when `value` does not match `schema`.
    pub fn assert_valid(&self, schema: &Value, value: &Value, what: &str) {
        let errors = self.errors(schema, value);
        assert!(
            errors.is_empty(),
            "{what} does not match its schema:\n  {}\nvalue: {value}\nschema: {schema}",
            errors.join("\n  ")
        );
    }

    /// `extra`: property names that sibling `allOf` parts declare, allowed here.
    fn check(
        &self,
        schema: &Value,
        value: &Value,
        at: &str,
        extra: &BTreeSet<String>,
        errors: &mut Vec<String>,
    ) {
        let Some(schema) = schema.as_object() else {
            if schema == &Value::Bool(false) {
                errors.push(format!("{at}: no value is allowed here"));
            }
            return; // `true` or `{}`: anything.
        };
        for key in schema.keys() {
            let known = matches!(
                key.as_str(),
                "$ref"
                    | "type"
                    | "properties"
                    | "required"
                    | "additionalProperties"
                    | "items"
                    | "oneOf"
                    | "anyOf"
                    | "allOf"
                    | "enum"
                    | "format"
                    | "minimum"
                    | "maximum"
                    | "minLength"
                    | "maxLength"
                    | "pattern"
                    | "maxItems"
                    | "minItems"
                    | "uniqueItems"
            ) || ANNOTATIONS.contains(&key.as_str());
            if !known {
                errors.push(format!("{at}: the validator does not know keyword `{key}`"));
            }
        }
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            self.check(self.resolve(reference), value, at, extra, errors);
        }
        if let Some(types) = schema.get("type") {
            self.check_type(types, value, at, errors);
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array)
            && !values.contains(value)
        {
            errors.push(format!("{at}: {value} is not one of {values:?}"));
        }
        self.check_bounds(schema, value, at, errors);
        self.check_composition(schema, value, at, extra, errors);
        if let Some(object) = value.as_object() {
            self.check_object(schema, object, at, extra, errors);
        }
        if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
            for (i, item) in array.iter().enumerate() {
                self.check(items, item, &format!("{at}[{i}]"), &BTreeSet::new(), errors);
            }
        }
    }

    fn check_type(&self, types: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
        let names: Vec<&str> = match types {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            other => {
                errors.push(format!(
                    "{at}: `type` must be a name or a list, not {other}"
                ));
                return;
            }
        };
        let fits = |name: &str| match name {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            _ => false,
        };
        if !names.iter().any(|n| fits(n)) {
            errors.push(format!("{at}: {value} is not of type {names:?}"));
        }
    }

    fn check_bounds(
        &self,
        schema: &serde_json::Map<String, Value>,
        value: &Value,
        at: &str,
        errors: &mut Vec<String>,
    ) {
        if let Some(n) = value.as_f64() {
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && n < min
            {
                errors.push(format!("{at}: {n} is below the minimum {min}"));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && n > max
            {
                errors.push(format!("{at}: {n} is above the maximum {max}"));
            }
            let range = match schema.get("format").and_then(Value::as_str) {
                Some("int32") => Some((f64::from(i32::MIN), f64::from(i32::MAX))),
                Some("int64") => Some((i64::MIN as f64, i64::MAX as f64)),
                _ => None,
            };
            if let Some((lo, hi)) = range
                && (n < lo || n > hi)
            {
                errors.push(format!("{at}: {n} does not fit its format"));
            }
        }
        if let (Some(max), Some(items)) = (
            schema.get("maxItems").and_then(Value::as_u64),
            value.as_array(),
        ) && items.len() as u64 > max
        {
            errors.push(format!("{at}: more than {max} items"));
        }
        if let (Some(min), Some(items)) = (
            schema.get("minItems").and_then(Value::as_u64),
            value.as_array(),
        ) && (items.len() as u64) < min
        {
            errors.push(format!("{at}: fewer than {min} items"));
        }
        if schema.get("uniqueItems") == Some(&Value::Bool(true))
            && let Some(items) = value.as_array()
            && (1..items.len()).any(|i| items[..i].contains(&items[i]))
        {
            errors.push(format!("{at}: items repeat"));
        }
        if let Some(s) = value.as_str() {
            let chars = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && chars < min
            {
                errors.push(format!("{at}: shorter than {min} characters"));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars > max
            {
                errors.push(format!("{at}: longer than {max} characters"));
            }
            // ECMA-262 and the `regex` crate agree on what the document's patterns use:
            // classes, `\uXXXX` escapes, anchors, groups and alternation.
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                let re = regex::Regex::new(pattern).unwrap_or_else(|e| {
                    panic!("{at}: the pattern {pattern:?} does not compile: {e}")
                });
                if !re.is_match(s) {
                    errors.push(format!("{at}: {s:?} does not match `{pattern}`"));
                }
            }
            if schema.get("format").and_then(Value::as_str) == Some("date-time") && !is_date_time(s)
            {
                errors.push(format!("{at}: {s:?} is not an RFC 3339 date-time"));
            }
        }
    }

    fn check_composition(
        &self,
        schema: &serde_json::Map<String, Value>,
        value: &Value,
        at: &str,
        extra: &BTreeSet<String>,
        errors: &mut Vec<String>,
    ) {
        let matching = |options: &Vec<Value>| {
            options
                .iter()
                .filter(|o| {
                    let mut e = Vec::new();
                    self.check(o, value, at, extra, &mut e);
                    e.is_empty()
                })
                .count()
        };
        if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
            let n = matching(options);
            if n != 1 {
                errors.push(format!(
                    "{at}: {value} matches {n} of the oneOf schemas, not 1"
                ));
            }
        }
        if let Some(options) = schema.get("anyOf").and_then(Value::as_array)
            && matching(options) == 0
        {
            errors.push(format!("{at}: {value} matches none of the anyOf schemas"));
        }
        if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
            // Each part describes some of the object's fields: together they close it.
            let mut declared = extra.clone();
            for part in parts {
                declared.extend(self.declared_properties(part));
            }
            for part in parts {
                self.check(part, value, at, &declared, errors);
            }
        }
    }

    fn check_object(
        &self,
        schema: &serde_json::Map<String, Value>,
        object: &serde_json::Map<String, Value>,
        at: &str,
        extra: &BTreeSet<String>,
        errors: &mut Vec<String>,
    ) {
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(name) {
                errors.push(format!("{at}: the required field `{name}` is missing"));
            }
        }
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            if let Some(more) = schema.get("additionalProperties") {
                for (key, v) in object {
                    self.check(more, v, &format!("{at}.{key}"), &BTreeSet::new(), errors);
                }
            }
            return;
        };
        for (key, v) in object {
            let here = format!("{at}.{key}");
            match (properties.get(key), schema.get("additionalProperties")) {
                (Some(property), _) => self.check(property, v, &here, &BTreeSet::new(), errors),
                (None, _) if extra.contains(key) => {}
                (None, Some(more)) => self.check(more, v, &here, &BTreeSet::new(), errors),
                (None, None) => errors.push(format!("{here}: the field is not described")),
            }
        }
    }

    /// The property names a schema declares, through references and `allOf`.
    fn declared_properties(&self, schema: &Value) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            out.extend(self.declared_properties(self.resolve(reference)));
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            out.extend(properties.keys().cloned());
        }
        for part in schema
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.extend(self.declared_properties(part));
        }
        out
    }
}

/// `2026-11-24T16:52:28Z`, optionally with fractional seconds or an offset.
fn is_date_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && (s.ends_with('Z') || s.ends_with('z') || s[19..].contains(['+', '-']))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A document in the shape utoipa writes: references, nullable fields as type lists and
    /// as `oneOf` with null, an enum, an `allOf` of a reference and an object.
    fn doc() -> Value {
        json!({"components": {"schemas": {
            "State": {"type": "string", "enum": ["open", "resolved"]},
            "Group": {
                "type": "object",
                "required": ["id", "state", "note", "at", "tags"],
                "properties": {
                    "id": {"type": "integer", "format": "int64", "minimum": 1},
                    "state": {"$ref": "#/components/schemas/State"},
                    "note": {"type": ["string", "null"], "maxLength": 5},
                    "at": {"type": "string", "format": "date-time"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "parent": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/State"}]},
                    "gpu": {}
                }
            },
            "Created": {"allOf": [
                {"$ref": "#/components/schemas/Group"},
                {"type": "object", "required": ["secret"], "properties": {"secret": {"type": "string"}}}
            ]}
        }}})
    }

    fn good() -> Value {
        json!({"id": 3, "state": "open", "note": null, "at": "2026-11-24T16:52:28Z",
               "tags": ["a"], "parent": "resolved", "gpu": {"name": "H100"}})
    }

    #[test]
    fn the_validator_accepts_a_matching_value() {
        let doc = doc();
        let v = Validator::new(&doc);
        let group = json!({"$ref": "#/components/schemas/Group"});
        assert_eq!(v.errors(&group, &good()), Vec::<String>::new());
        let mut created = good();
        created["secret"] = json!("s3cret");
        let created_schema = json!({"$ref": "#/components/schemas/Created"});
        assert_eq!(v.errors(&created_schema, &created), Vec::<String>::new());
    }

    /// What is wrong, how to make a good value so, and what the error must say.
    type Spoiled = (&'static str, fn(&mut Value), &'static str);

    #[test]
    fn the_validator_rejects_every_kind_of_mismatch() {
        let doc = doc();
        let v = Validator::new(&doc);
        let group = json!({"$ref": "#/components/schemas/Group"});
        let broken: [Spoiled; 11] = [
            (
                "an undescribed field",
                |g| g["extra"] = json!(1),
                "not described",
            ),
            (
                "a missing required field",
                |g| {
                    g.as_object_mut().unwrap().remove("note");
                },
                "`note` is missing",
            ),
            ("a wrong type", |g| g["id"] = json!("3"), "not of type"),
            (
                "a float for an integer",
                |g| g["id"] = json!(3.5),
                "not of type",
            ),
            (
                "a value outside the enum",
                |g| g["state"] = json!("closed"),
                "not one of",
            ),
            (
                "null where it is not allowed",
                |g| g["tags"] = json!(null),
                "not of type",
            ),
            (
                "a wrong array item",
                |g| g["tags"] = json!(["a", 2]),
                "$.tags[1]",
            ),
            (
                "a oneOf that nothing matches",
                |g| g["parent"] = json!(7),
                "oneOf",
            ),
            (
                "a number below the minimum",
                |g| g["id"] = json!(0),
                "below the minimum",
            ),
            (
                "a string over its length",
                |g| g["note"] = json!("toolong"),
                "longer than",
            ),
            (
                "a malformed date-time",
                |g| g["at"] = json!("yesterday"),
                "date-time",
            ),
        ];
        for (what, spoil, expect) in broken {
            let mut value = good();
            spoil(&mut value);
            let errors = v.errors(&group, &value);
            assert!(
                errors.iter().any(|e| e.contains(expect)),
                "{what}: expected an error containing {expect:?}, got {errors:?}"
            );
        }
        // allOf closes the object over its parts together: a field neither part names fails.
        let mut created = good();
        created["secret"] = json!("s");
        created["stray"] = json!(true);
        let errors = v.errors(&json!({"$ref": "#/components/schemas/Created"}), &created);
        assert!(errors.iter().any(|e| e.contains("$.stray")), "{errors:?}");
        created.as_object_mut().unwrap().remove("stray");
        created.as_object_mut().unwrap().remove("secret");
        let errors = v.errors(&json!({"$ref": "#/components/schemas/Created"}), &created);
        assert!(errors.iter().any(|e| e.contains("`secret`")), "{errors:?}");
    }

    #[test]
    fn the_validator_refuses_keywords_it_does_not_check() {
        let doc = doc();
        let v = Validator::new(&doc);
        let schema = json!({"type": "number", "multipleOf": 2});
        let errors = v.errors(&schema, &json!(3));
        assert!(
            errors.iter().any(|e| e.contains("`multipleOf`")),
            "{errors:?}"
        );
    }

    #[test]
    fn the_validator_checks_patterns_and_item_counts() {
        let doc = doc();
        let v = Validator::new(&doc);
        let schema = json!({"type": "string", "pattern": "^[^\\u0000-\\u001f]+$"});
        assert!(v.errors(&schema, &json!("ok")).is_empty());
        let errors = v.errors(&schema, &json!("tab\there"));
        assert!(
            errors.iter().any(|e| e.contains("does not match")),
            "{errors:?}"
        );
        let schema = json!({"type": "array", "maxItems": 1});
        assert!(v.errors(&schema, &json!([1])).is_empty());
        let errors = v.errors(&schema, &json!([1, 2]));
        assert!(
            errors.iter().any(|e| e.contains("more than 1")),
            "{errors:?}"
        );
        let schema = json!({"type": "array", "minItems": 1});
        let errors = v.errors(&schema, &json!([]));
        assert!(
            errors.iter().any(|e| e.contains("fewer than 1")),
            "{errors:?}"
        );
        let schema = json!({"type": "array", "uniqueItems": true});
        assert!(v.errors(&schema, &json!([1, 2])).is_empty());
        let errors = v.errors(&schema, &json!([1, 2, 1]));
        assert!(errors.iter().any(|e| e.contains("repeat")), "{errors:?}");
    }
}
