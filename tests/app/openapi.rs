//! The OpenAPI document at `GET /api/v1/openapi.json` (issue 20 item 3), held against the live
//! router from every side, so that neither can change without the other:
//! - the routes: the `/api/` paths and probes axum itself holds (read from the router, not
//!   from the document) are exactly the documented paths, and on each of them exactly the
//!   documented methods answer (every other method gets 405);
//! - the scopes: each operation's security requirement names exactly the scopes the handler
//!   lets through (each single-scope token is tried on every operation);
//! - the bodies (`answers`, `admin_answers`): real answers, successes and errors, of every
//!   operation are checked against the schema documented for their status, with undescribed
//!   fields refused (`schema`, a strict validator); documented fields that may be null are
//!   always sent; the schemas written by hand for the engine's types match real values
//!   (`engine`).

mod admin_answers;
mod answers;
mod authz;
mod engine;
mod fuzz;
mod schema;

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use crate::support::{TestApp, TestResponse};
use schema::Validator;

/// The methods an operation can have here (axum answers HEAD for GET by itself).
const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// The probes DESIGN.md section 5 lists with the API, documented although not under `/api/`.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The served document.
pub struct Spec {
    pub doc: Value,
}

impl Spec {
    /// Fetches the document the way a client does: no token.
    pub async fn of(app: &TestApp) -> Spec {
        let res = app.get("/api/v1/openapi.json").await;
        assert_eq!(res.status, StatusCode::OK, "{}", res.body);
        Spec { doc: res.json() }
    }

    fn paths(&self) -> &serde_json::Map<String, Value> {
        self.doc["paths"].as_object().expect("paths")
    }

    /// Every operation: (method, path template, operation).
    pub fn operations(&self) -> Vec<(&'static str, &str, &Value)> {
        let mut out = Vec::new();
        for (path, item) in self.paths() {
            for method in METHODS {
                if let Some(op) = item.get(method) {
                    out.push((method, path.as_str(), op));
                }
            }
        }
        out
    }

    /// The documented path a concrete request path falls under: literal segments beat
    /// parameters (`/rules/preview` over `/rules/{id}`), as in the router.
    pub fn template_for(&self, path: &str) -> Option<&str> {
        let path = path.split('?').next().unwrap_or(path);
        let segments: Vec<&str> = path.split('/').collect();
        self.paths()
            .keys()
            .filter_map(|template| {
                let parts: Vec<&str> = template.split('/').collect();
                let fits = parts.len() == segments.len()
                    && parts.iter().zip(&segments).all(|(t, s)| {
                        (t.starts_with('{') && t.ends_with('}') && !s.is_empty()) || t == s
                    });
                let literal = parts.iter().filter(|t| !t.starts_with('{')).count();
                fits.then_some((literal, template.as_str()))
            })
            .max()
            .map(|(_, template)| template)
    }

    pub fn operation(&self, method: &str, template: &str) -> Option<&Value> {
        self.paths().get(template)?.get(method)
    }

    /// The scopes that may call `op`, or `None` for a public operation.
    fn scopes(op: &Value) -> Option<BTreeSet<String>> {
        let requirements = op.get("security")?.as_array()?;
        let mut scopes = BTreeSet::new();
        for requirement in requirements {
            let list = requirement["bearer"].as_array().unwrap_or_else(|| {
                panic!("a requirement other than the bearer scheme: {requirement}")
            });
            scopes.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        Some(scopes)
    }
}

/// `template` with every `{parameter}` replaced by `value`.
fn concrete(template: &str, value: &str) -> String {
    template
        .split('/')
        .map(|s| if s.starts_with('{') { value } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// Sends requests and checks every answer against the document: its status must be one the
/// operation documents, and its body must match that status's schema (or be empty when the
/// status documents no body). Records which (method, path, status) it saw.
pub struct Checker<'a> {
    pub app: &'a TestApp,
    pub spec: &'a Spec,
    pub seen: BTreeSet<(String, String, u16)>,
}

impl<'a> Checker<'a> {
    pub fn new(app: &'a TestApp, spec: &'a Spec) -> Checker<'a> {
        Checker {
            app,
            spec,
            seen: BTreeSet::new(),
        }
    }

    fn validator(&self) -> Validator<'a> {
        Validator::new(&self.spec.doc)
    }

    /// Sends `req` and checks its answer.
    pub async fn send(&mut self, req: Request<Body>) -> TestResponse {
        let method = req.method().as_str().to_ascii_lowercase();
        let path = req.uri().path().to_owned();
        let res = self.app.send(req).await;
        self.check_answer(&method, &path, &res);
        res
    }

    /// Sends a JSON body the server should accept: the body must match the operation's
    /// documented request schema too.
    pub async fn json(
        &mut self,
        token: &str,
        method: &str,
        path: &str,
        body: &Value,
    ) -> TestResponse {
        let template = self.template(path);
        let op = self.op(method, &template);
        let schema = &op["requestBody"]["content"]["application/json"]["schema"];
        assert!(
            !schema.is_null(),
            "{method} {template} documents no JSON body"
        );
        self.validator().assert_valid(
            schema,
            body,
            &format!("the request body of {method} {template}"),
        );
        self.raw(
            token,
            method,
            path,
            "application/json",
            body.to_string().into_bytes(),
        )
        .await
    }

    /// Sends a body as given (malformed ones included).
    pub async fn raw(
        &mut self,
        token: &str,
        method: &str,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> TestResponse {
        let mut req = Request::builder()
            .method(method.to_ascii_uppercase().as_str())
            .uri(path)
            .header("content-type", content_type);
        if !token.is_empty() {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        self.send(req.body(Body::from(body)).unwrap()).await
    }

    /// `GET path` with `token` (none when empty).
    pub async fn get(&mut self, token: &str, path: &str) -> TestResponse {
        self.bodyless(token, "get", path).await
    }

    /// A request without a body.
    pub async fn bodyless(&mut self, token: &str, method: &str, path: &str) -> TestResponse {
        let mut req = Request::builder()
            .method(method.to_ascii_uppercase().as_str())
            .uri(path);
        if !token.is_empty() {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }

    fn template(&self, path: &str) -> String {
        self.spec
            .template_for(path)
            .unwrap_or_else(|| panic!("{path} is not a documented path"))
            .to_owned()
    }

    fn op(&self, method: &str, template: &str) -> &'a Value {
        self.spec
            .operation(method, template)
            .unwrap_or_else(|| panic!("{method} {template} is not a documented operation"))
    }

    fn check_answer(&mut self, method: &str, path: &str, res: &TestResponse) {
        let template = self.template(path);
        let op = self.op(method, &template);
        let status = res.status.as_u16();
        let what = format!("{} {template} → {status}", method.to_uppercase());
        let mut documented = op["responses"]
            .get(status.to_string())
            .unwrap_or_else(|| panic!("{what} is not a documented status: {}", res.body));
        if let Some(reference) = documented.get("$ref").and_then(Value::as_str) {
            documented = self.validator().resolve(reference);
        }
        for name in documented
            .get("headers")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(name, _)| name)
        {
            assert!(
                res.headers.contains_key(name.as_str()),
                "{what} lacks its {name} header"
            );
        }
        match documented.get("content").and_then(Value::as_object) {
            None => assert!(
                res.body.is_empty(),
                "{what} documents no body: {}",
                res.body
            ),
            Some(content) => {
                let media = res
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let schema = content
                    .iter()
                    .find(|(documented, _)| media.starts_with(documented.as_str()))
                    .map(|(_, c)| &c["schema"])
                    .unwrap_or_else(|| panic!("{what}: {media:?} is not a documented media type"));
                let body = if media.starts_with("application/json") {
                    res.json()
                } else {
                    Value::String(res.body.clone()) // Text answers (the probes) are strings.
                };
                self.validator().assert_valid(schema, &body, &what);
            }
        }
        self.seen.insert((method.to_owned(), template, status));
    }
}

/// The quoted paths in the router's debug output: the routes axum holds, read from the router
/// itself rather than from the document. The pages' paths are returned too, so that a change in
/// axum's debug output shows as an empty or partial list, not as a passing test.
fn router_paths(router: &axum::Router) -> BTreeSet<String> {
    let debug = format!("{router:?}");
    let mut paths = BTreeSet::new();
    for (i, _) in debug.match_indices("\"/") {
        let rest = &debug[i + 1..];
        if let Some(end) = rest.find('"') {
            paths.insert(rest[..end].to_owned());
        }
    }
    paths
}

#[tokio::test]
async fn the_document_is_public_openapi_3_1_json_built_once() {
    let app = TestApp::spawn().await;
    let res = app.get("/api/v1/openapi.json").await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert!(
        res.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let doc = res.json();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "gpu-triage API v1");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The same bytes each time, whichever router answers.
    let other = TestApp::spawn().await;
    assert_eq!(other.get("/api/v1/openapi.json").await.body, res.body);
    // A token is not needed, and a bad one is not looked at.
    let with_junk = app
        .send(
            Request::get("/api/v1/openapi.json")
                .header("authorization", "Bearer nonsense")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(with_junk.status, StatusCode::OK);
}

#[tokio::test]
async fn every_api_route_of_the_router_is_described_with_exactly_its_methods() {
    let app = TestApp::spawn().await;
    let spec = Spec::of(&app).await;
    let held = router_paths(&app.router);
    // The enumeration sees the whole router (the pages too), so it is not vacuous.
    for page in ["/reports/{id}", "/login", "/static/app.css"] {
        assert!(
            held.contains(page),
            "{page} missing from the router's paths: {held:?}"
        );
    }
    let api: BTreeSet<&str> = (held.iter())
        .map(String::as_str)
        .filter(|p| p.starts_with("/api/") || PROBES.contains(p))
        .collect();
    let documented: BTreeSet<&str> = spec.paths().keys().map(String::as_str).collect();
    assert_eq!(
        api, documented,
        "the router's API paths and the documented paths differ"
    );
    assert!(documented.len() >= 21, "{documented:?}");

    // On each path, exactly the documented methods answer; any other gets 405 (the JSON error
    // under /api/).
    let mut served = 0;
    for (template, item) in spec.paths() {
        let path = concrete(template, "1");
        for method in METHODS {
            let req = Request::builder()
                .method(method.to_ascii_uppercase().as_str())
                .uri(&path)
                .body(Body::empty())
                .unwrap();
            let res = app.send(req).await;
            let what = format!("{} {path}", method.to_uppercase());
            if item.get(method).is_some() {
                served += 1;
                assert_ne!(
                    res.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{what}: {}",
                    res.body
                );
                assert!(
                    !res.body.contains("endpoint not found"),
                    "{what} fell through to the fallback"
                );
            } else {
                assert_eq!(
                    res.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{what} is served undocumented: {}",
                    res.body
                );
                if path.starts_with("/api/") {
                    assert_eq!(res.error_code(), "method_not_allowed");
                }
            }
        }
    }
    assert_eq!(served, spec.operations().len());
    // The probe tells a missing route apart.
    let res = app.get("/api/v1/nothing-here").await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
    assert!(res.body.contains("endpoint not found"), "{}", res.body);
}

/// A request each operation's handler gets past its extractors with, so that what it answers
/// depends only on the token: (content type, body).
fn probe_body(method: &str, template: &str) -> (&'static str, Vec<u8>) {
    let json = |v: Value| ("application/json", v.to_string().into_bytes());
    let rule = json!({"id": "team.probe", "category": "library_error", "title": "Probe failed",
        "pattern": r"ProbeKernel failed: code (?P<code>\d+)",
        "examples": ["ProbeKernel failed: code 3"], "counter_examples": ["ProbeKernel started"]});
    match (method, template) {
        ("post", "/api/v1/classify") => ("text/plain", answers::OOM_LOG.as_bytes().to_vec()),
        ("post", "/api/v1/reports") => {
            answers::multipart(&[("log", Some("p.log"), answers::OOM_LOG.as_bytes())])
        }
        ("patch", "/api/v1/groups/{id}") => json(json!({"state": "open"})),
        ("post", "/api/v1/groups/{id}/fixes") => json(json!({"summary": "pin the index"})),
        ("post", "/api/v1/groups/{id}/merge") => json(json!({"into": 2})),
        ("post", "/api/v1/jobs/claim") => {
            json(json!({"worker": "probe", "wait_secs": 0, "no_gpu": true, "sandbox": "bwrap"}))
        }
        ("post", "/api/v1/jobs/{id}/heartbeat") => json(json!({"lease_token": "probe"})),
        ("post", "/api/v1/jobs/{id}/result") => {
            json(json!({"lease_token": "probe", "duration_ms": 1, "sandbox": "bwrap"}))
        }
        ("post", "/api/v1/rules") | ("post", "/api/v1/rules/preview") => json(rule),
        ("put", "/api/v1/rules/{id}") => json(json!({"enabled": true})),
        ("post", "/api/v1/webhooks") => {
            json(json!({"url": "http://127.0.0.1:9/hook", "events": ["new_group"]}))
        }
        ("patch", "/api/v1/webhooks/{id}") => json(json!({"description": "probe"})),
        ("post", "/api/v1/tokens") => json(json!({"name": "probe", "scopes": ["read"]})),
        ("put", "/api/v1/projects/{project}/retention") => json(json!({"log_days": 30})),
        _ => ("application/json", Vec::new()),
    }
}

#[tokio::test]
async fn every_operation_lists_the_scopes_the_server_enforces() {
    let app = answers::app().await;
    let spec = Spec::of(&app).await;
    let mut checker = Checker::new(&app, &spec);
    let mut tokens = BTreeMap::new();
    for scope in Scope::ALL {
        tokens.insert(scope.as_str(), app.token(scope.as_str(), &[scope]).await);
    }
    for (method, template, op) in spec.operations() {
        let what = format!("{} {template}", method.to_uppercase());
        // Revoking a token probes an id no token has: the probe's own tokens stay valid.
        let id = if template == "/api/v1/tokens/{id}" {
            "999999"
        } else {
            "1"
        };
        let mut path = concrete(template, id);
        if template == "/api/v1/search" {
            path.push_str("?q=probe");
        }
        let (content_type, body) = probe_body(method, template);
        let Some(scopes) = Spec::scopes(op) else {
            let res = checker.raw("", method, &path, content_type, body).await;
            assert!(res.status.is_success(), "{what} is public: {}", res.body);
            continue;
        };
        assert!(!scopes.is_empty(), "{what} names no scope");
        for scope in &scopes {
            assert!(
                tokens.contains_key(scope.as_str()),
                "{what} names an unknown scope {scope}"
            );
        }
        let res = checker
            .raw("", method, &path, content_type, body.clone())
            .await;
        assert_eq!(
            res.status,
            StatusCode::UNAUTHORIZED,
            "{what} without a token"
        );
        for (scope, token) in &tokens {
            let res = checker
                .raw(token, method, &path, content_type, body.clone())
                .await;
            let allowed = scopes.contains(*scope) || *scope == "admin";
            if allowed {
                assert!(
                    !matches!(res.status, StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED),
                    "{what} documents {scope} but refuses it: {} {}",
                    res.status,
                    res.body
                );
            } else {
                assert_eq!(
                    res.status,
                    StatusCode::FORBIDDEN,
                    "{what} does not document {scope} but lets it through: {}",
                    res.body
                );
                assert_eq!(res.error_code(), "forbidden");
            }
        }
    }
}

/// Whether `schema` (through references) admits null.
fn admits_null(v: &Validator, schema: &Value) -> bool {
    v.errors(schema, &Value::Null).is_empty()
}

#[tokio::test]
async fn fields_of_answers_that_may_be_null_are_always_sent() {
    // A client can tell "absent" from "null" only if the document says which fields are
    // always there: every nullable field of an answer is required (sent as null). Fields that
    // are left out when empty are documented as not nullable.
    let app = TestApp::spawn().await;
    let spec = Spec::of(&app).await;
    let v = Validator::new(&spec.doc);
    let mut queue: Vec<Value> = Vec::new();
    for (_, _, op) in spec.operations() {
        for (status, response) in op["responses"].as_object().unwrap() {
            if status.starts_with('2') {
                for (_, content) in response["content"].as_object().into_iter().flatten() {
                    queue.push(content["schema"].clone());
                }
            }
        }
    }
    let mut visited = BTreeSet::new();
    let mut problems = Vec::new();
    let mut objects = 0;
    while let Some(schema) = queue.pop() {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            if visited.insert(reference.to_owned()) {
                queue.push(v.resolve(reference).clone());
            }
            continue;
        }
        for key in ["oneOf", "anyOf", "allOf"] {
            queue.extend(schema[key].as_array().into_iter().flatten().cloned());
        }
        if let Some(items) = schema.get("items") {
            queue.push(items.clone());
        }
        let Some(properties) = schema["properties"].as_object() else {
            continue;
        };
        objects += 1;
        let required: BTreeSet<&str> = (schema["required"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        for (name, property) in properties {
            if admits_null(&v, property) && !required.contains(name.as_str()) {
                problems.push(format!("{name} in {}", schema["description"]));
            }
            queue.push(property.clone());
        }
    }
    assert!(objects > 30, "only {objects} answer objects were reached");
    assert!(
        problems.is_empty(),
        "nullable but not required: {problems:#?}"
    );
}
