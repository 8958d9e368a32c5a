//! The OpenAPI 3.1 document of API v1 (issue 20 item 3), served at `GET /api/v1/openapi.json`.
//!
//! Nothing here lists routes: `api::routes` registers each handler through utoipa-axum's
//! `routes!`, which takes the path and methods from the handler's `#[utoipa::path]` and the
//! schemas from the types it names, so a route is described by the same declaration that
//! serves it. This module adds what no single handler declares: the document's frame (title,
//! tags, the bearer scheme and its scopes) and the errors every operation can get from the
//! layers around its handler (authentication, rate limits, load shedding, body caps).
//!
//! The document is public, like a health probe: it describes shapes, never stored data.

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, ToSchema};

use crate::api_types::ErrorBody;
use crate::web::error::AppError;
use crate::web::{limits, request_id};

/// The name of the bearer-token security scheme. Operations name it as the literal `"bearer"`
/// in their `security(...)` (the attribute takes literals only); the tests check every
/// operation's requirement against the scopes its handler enforces.
const BEARER: &str = "bearer";

/// The document's frame; `api::routes` adds every operation to it.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "gpu-triage API v1",
        description = "Classify GPU crash logs, store reports, triage groups of recurring \
            failures, reproduce scripts on GPU workers, and manage team rules, webhooks and \
            retention.\n\n\
            Every error is `{\"error\": {\"code\": \"snake_case\", \"message\": \"...\"}}`; \
            clients match on `code`. Authenticate with `Authorization: Bearer <token>`; each \
            operation lists the scopes that may call it, and `admin` may call every operation."
    ),
    modifiers(&Bearer),
    components(schemas(ErrorBody)),
    tags(
        (name = "reports", description = "Classify logs and store reports."),
        (name = "groups", description = "Groups of recurring failures, their fixes and triage."),
        (name = "search", description = "Full-text search over reports, groups and fixes."),
        (name = "jobs", description = "The reproduction queue, for GPU workers."),
        (name = "rules", description = "Built-in and team classification rules."),
        (name = "tokens", description = "API tokens: create (the secret shown once), list, \
            revoke; for admins."),
        (name = "people", description = "The people who sign in through the identity \
            provider: list, disable (signed out everywhere, their tokens revoked), enable, end \
            their sessions; for admins."),
        (name = "webhooks", description = "Endpoints notified of new groups, regressions, \
            reproductions and rule changes."),
        (name = "retention", description = "How long raw logs and reports are kept, per \
            project, and what was removed."),
        (name = "meta", description = "This document."),
        (name = "probes", description = "Liveness, readiness and metrics, for load balancers \
            and monitoring; no token."),
    )
)]
pub(super) struct ApiDoc;

/// Declares the bearer-token scheme.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("gtr_ followed by 64 hex digits")
            .description(Some(
                "An API token from `gpu-triage token create --scope S --name N`. Scopes: \
                 `ingest` (upload, classify, record fixes, triage), `read` (reports, groups, \
                 search, rules), `worker` (reproduction jobs), `admin` (everything, plus rules, \
                 webhooks and retention). An operation's security requirements name the scopes \
                 that may call it (any one of them suffices; `admin` always does). Missing or \
                 revoked token: 401; a token without the scope: 403.",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(BEARER, SecurityScheme::Http(scheme));
    }
}

/// An error answer of `description`, with `Retry-After` when `retry` says so.
fn error_response(description: &str, retry: bool) -> RefOr<utoipa::openapi::Response> {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(ErrorBody::name())))
        .build();
    let mut response = ResponseBuilder::new()
        .description(description)
        .content("application/json", content);
    if retry {
        let seconds = ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0));
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(seconds)
                .description(Some("Seconds to wait before retrying."))
                .build(),
        );
    }
    response.build().into()
}

/// An answer of the layers around every handler.
struct CommonError {
    status: &'static str,
    /// Its name under `components.responses`.
    name: &'static str,
    description: &'static str,
    /// It carries `Retry-After`.
    retry: bool,
    applies: Applies,
}

/// The answers of the layers around handlers: authentication, rate limits, body caps and
/// pacing, load shedding, and the internal error.
const COMMON_ERRORS: [CommonError; 8] = [
    CommonError {
        status: "401",
        name: "Unauthorized",
        description: "`unauthorized`: the token is missing, malformed or revoked.",
        retry: false,
        applies: Applies::Authenticated,
    },
    CommonError {
        status: "403",
        name: "Forbidden",
        description: "`forbidden`: the token lacks the scope this operation needs.",
        retry: false,
        applies: Applies::Authenticated,
    },
    CommonError {
        status: "408",
        name: "BodyTooSlow",
        description: "`body_too_slow`: the request body arrived below the minimum rate.",
        retry: false,
        applies: Applies::WithBody,
    },
    CommonError {
        status: "413",
        name: "TooLarge",
        description: "`too_large`: the body (decoded, when gzip) is over this operation's cap; nothing \
         was stored.",
        retry: false,
        applies: Applies::WithBody,
    },
    CommonError {
        status: "431",
        name: "HeadersTooLarge",
        description: "`headers_too_large`: more than 100 request headers, or more than 64 KiB of \
         them.",
        retry: false,
        applies: Applies::Every,
    },
    CommonError {
        status: "429",
        name: "RateLimited",
        description: "`rate_limited`: the token is over its request rate; `token_busy`: it already has \
         its share of requests in flight.",
        retry: true,
        applies: Applies::Authenticated,
    },
    CommonError {
        status: "500",
        name: "Internal",
        description: "`internal`: an unexpected failure; the detail is only in the server log.",
        retry: false,
        applies: Applies::Authenticated,
    },
    CommonError {
        status: "503",
        name: "Unavailable",
        description: "`unavailable`: the database is unreachable; `overloaded`: the server sheds load.",
        retry: true,
        applies: Applies::DatabaseOrShed,
    },
];

/// Which operations a common error applies to.
#[derive(Clone, Copy)]
enum Applies {
    /// Operations that read the database (every one that takes a token) or that the load
    /// shedder covers (all but the probes and the worker's long-poll).
    DatabaseOrShed,
    /// Operations that take a token.
    Authenticated,
    /// Operations that read a request body.
    WithBody,
    /// Every operation (the outermost layer checks request heads).
    Every,
}

/// Adds the common errors to every operation (an operation's own description of a status
/// wins), as shared responses under `components.responses`, then the `X-Request-Id` header
/// to every answer, since the layer around all routes sets it on each.
pub(super) fn add_common_errors(spec: &mut OpenApi) {
    let components = spec.components.get_or_insert_with(Default::default);
    for e in &COMMON_ERRORS {
        (components.responses).insert(e.name.to_owned(), error_response(e.description, e.retry));
    }
    for (path, item) in spec.paths.paths.iter_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for op in operations.into_iter().flatten() {
            let authenticated = op.security.as_ref().is_some_and(|s| !s.is_empty());
            let with_body = op.request_body.is_some();
            for e in &COMMON_ERRORS {
                let applies = match e.applies {
                    Applies::DatabaseOrShed => authenticated || !limits::exempt(path),
                    Applies::Authenticated => authenticated,
                    Applies::WithBody => with_body,
                    Applies::Every => true,
                };
                if applies {
                    let shared = Ref::new(format!("#/components/responses/{}", e.name));
                    (op.responses.responses)
                        .entry(e.status.to_owned())
                        .or_insert(RefOr::Ref(shared));
                }
            }
        }
    }
    add_request_id(spec);
}

/// Declares `X-Request-Id` on every answer the document describes (the shared ones under
/// `components.responses` and each operation's own): `web::request_id` sets it on all of them.
fn add_request_id(spec: &mut OpenApi) {
    let id = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(request_id::MAX_LEN))
        .pattern(Some("^[A-Za-z0-9._:/#@+-]+$"));
    let header = HeaderBuilder::new()
        .schema(id)
        .description(Some(
            "This request's id, in every log line it caused: the client's own `X-Request-Id` \
             when it sent a sane one (1 to 128 printable ASCII characters, no spaces), else \
             one the server made up (32 hex digits).",
        ))
        .build();
    let shared = spec
        .components
        .iter_mut()
        .flat_map(|c| c.responses.values_mut());
    let own = spec.paths.paths.values_mut().flat_map(|item| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        .flat_map(|op| op.responses.responses.values_mut())
    });
    for response in shared.chain(own) {
        if let RefOr::T(response) = response {
            (response.headers).insert("X-Request-Id".to_owned(), header.clone());
        }
    }
}

/// The document as served, serialized once.
static DOCUMENT: OnceLock<Bytes> = OnceLock::new();

/// Keeps `spec` as the served document. It describes types and routes only, never state, so
/// every router this process builds has the same one and the first to arrive is kept.
pub(super) fn publish(spec: &OpenApi) {
    DOCUMENT.get_or_init(|| match serde_json::to_vec(spec) {
        Ok(json) => Bytes::from(json),
        Err(e) => {
            tracing::error!(error = %e, "the OpenAPI document could not be serialized");
            Bytes::new()
        }
    });
}

/// `GET /api/v1/openapi.json`: this API's OpenAPI 3.1 document.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of API v1 (this document).",
            content_type = "application/json", body = serde_json::Value),
    )
)]
pub async fn show_openapi() -> Response {
    match DOCUMENT.get().filter(|d| !d.is_empty()) {
        Some(document) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            document.clone(),
        )
            .into_response(),
        None => {
            AppError::Internal(anyhow::anyhow!("the OpenAPI document is not built")).into_response()
        }
    }
}
