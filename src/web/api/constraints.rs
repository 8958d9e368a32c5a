//! Constraints the server enforces that the handlers' derived schemas cannot state on their
//! own (issue 38 item 8, SECURITY.md item 22): a token's scopes are the four names and at least
//! one, its name is not blank and holds no control character; a classified log is not empty or
//! blank; a rule body is either a whole rule (category, title and pattern) or only `enabled`, and
//! creating one names its id; a bulk call's ids are 1-100 distinct positive ids. Declared here,
//! on the document the handlers produce, so a client or a fuzzer reading it knows every refusal
//! a schema can express; what no schema can say (a
//! pattern that must compile, a log that must be text, an assignee that must exist) stays in the
//! operations' 422/415 descriptions.

use utoipa::openapi::schema::{ArrayBuilder, Object, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{OpenApi, RefOr, Required};

use crate::auth::Scope;

/// A string with at least one character that is not ASCII whitespace (what
/// `ingest::stream::check_whole` calls blank), as a JSON Schema pattern.
const NOT_BLANK: &str = "[^ \\t\\n\\f\\r]";

/// A token name: no control character (C0, DEL, C1) anywhere, and something besides
/// whitespace.
const TOKEN_NAME: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$";

/// Adds the constraints to `spec`.
pub(super) fn declare(spec: &mut OpenApi) {
    constrain_token_request(spec);
    constrain_classify_body(spec);
    split_rule_bodies(spec);
    constrain_bulk_ids(spec);
}

/// A bulk call's `ids`: 1 to `MAX_BULK` distinct positive group ids (utoipa derives the
/// bounds of the list, not that its items are distinct and positive).
fn constrain_bulk_ids(spec: &mut OpenApi) {
    for name in ["BulkChange", "BulkMerge"] {
        let Some(body) = component(spec, name) else {
            continue;
        };
        let id = ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(utoipa::openapi::schema::SchemaFormat::KnownFormat(
                utoipa::openapi::schema::KnownFormat::Int64,
            )))
            .minimum(Some(1));
        let ids = ArrayBuilder::new()
            .items(id)
            .min_items(Some(1))
            .max_items(Some(crate::api_types::MAX_BULK))
            .unique_items(true)
            .description(Some(
                "1-100 distinct group ids; an id that names no group is refused (422 `bad_bulk`).",
            ));
        body.properties.insert("ids".into(), ids.build().into());
    }
}

fn component<'a>(spec: &'a mut OpenApi, name: &str) -> Option<&'a mut Object> {
    let schemas = &mut spec.components.as_mut()?.schemas;
    match schemas.get_mut(name)? {
        RefOr::T(Schema::Object(object)) => Some(object),
        _ => None,
    }
}

fn constrain_token_request(spec: &mut OpenApi) {
    let Some(request) = component(spec, "TokenRequest") else {
        return;
    };
    let scope = ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(Scope::ALL.iter().map(|s| s.as_str())));
    let scopes = ArrayBuilder::new()
        .items(scope)
        .min_items(Some(1))
        .description(Some(
            "What the token may do: at least one of `read`, `ingest`, `worker`, `admin`.",
        ));
    request
        .properties
        .insert("scopes".into(), scopes.build().into());
    if let Some(RefOr::T(Schema::Object(name))) = request.properties.get_mut("name") {
        name.pattern = Some(TOKEN_NAME.into());
    }
}

fn constrain_classify_body(spec: &mut OpenApi) {
    let Some(classify) = spec.paths.paths.get_mut("/api/v1/classify") else {
        return;
    };
    let Some(body) = classify
        .post
        .as_mut()
        .and_then(|op| op.request_body.as_mut())
    else {
        return;
    };
    for content in body.content.values_mut() {
        content.schema = Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .pattern(Some(NOT_BLANK))
                .into(),
        );
    }
}

/// `RuleBody` is one struct for three operations; each takes only some of its shapes: a whole
/// rule (`RuleWrite`: category, title and pattern required) or a switch (`RuleSwitch`: only
/// `id`, `enabled` and `confirm`, `enabled` required). Create takes either with an id,
/// replace takes either, the dry run takes a whole rule.
fn split_rule_bodies(spec: &mut OpenApi) {
    let Some(body) = component(spec, "RuleBody").cloned() else {
        return;
    };
    let write = with_required(body.clone(), &["category", "title", "pattern"]);
    let mut switch = body;
    switch
        .properties
        .retain(|name, _| matches!(name.as_str(), "id" | "enabled" | "confirm"));
    let switch = with_required(switch, &["enabled"]);
    let either = |extra: &[&str]| {
        OneOfBuilder::new()
            .item(with_required(write.clone(), extra))
            .item(with_required(switch.clone(), extra))
            .build()
    };
    let shapes = [
        ("/api/v1/rules", "post", Schema::OneOf(either(&["id"]))),
        ("/api/v1/rules/{id}", "put", Schema::OneOf(either(&[]))),
        (
            "/api/v1/rules/preview",
            "post",
            Schema::Object(write.clone()),
        ),
    ];
    for (path, method, schema) in shapes {
        let Some(item) = spec.paths.paths.get_mut(path) else {
            continue;
        };
        let op = match method {
            "post" => item.post.as_mut(),
            _ => item.put.as_mut(),
        };
        let Some(body) = op.and_then(|op| op.request_body.as_mut()) else {
            continue;
        };
        body.required = Some(Required::True);
        for content in body.content.values_mut() {
            content.schema = Some(RefOr::T(schema.clone()));
        }
    }
}

fn with_required(mut object: Object, fields: &[&str]) -> Object {
    for field in fields {
        if !object.required.iter().any(|r| r == field) {
            object.required.push((*field).to_owned());
        }
    }
    object
}
