//! Portal pages for webhooks, for admins only: `/webhooks` (the endpoints and a form to add
//! one; the new endpoint's secret is shown once, on the page that answers the form) and
//! `/webhooks/{id}` (edit, enable or disable, send a test, delete, and the delivery log with
//! every attempt's status code). Every form post carries the session's CSRF token.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use crate::api_types::webhooks::{
    Delivery, DeliveryState, Endpoint, EndpointRequest, EventKind, Format,
};
use crate::app::{self, webhooks};
use crate::rules::Category;
use crate::time::Timestamp;
use crate::web::auth::PortalUser;
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, WebhookId};
use crate::web::scope::{Admin, ScopedUser};
use crate::web::state::AppState;

/// An endpoint in a list or on its page.
pub struct EndpointRow {
    pub endpoint: Endpoint,
    /// Its filters in words ("every project and category" when none).
    pub filters: String,
}

impl From<Endpoint> for EndpointRow {
    fn from(endpoint: Endpoint) -> Self {
        let mut parts = Vec::new();
        if !endpoint.projects.is_empty() {
            parts.push(format!("projects {}", endpoint.projects.join(", ")));
        }
        if !endpoint.categories.is_empty() {
            let names: Vec<&str> = endpoint.categories.iter().map(|c| c.as_str()).collect();
            parts.push(format!("categories {}", names.join(", ")));
        }
        let filters = if parts.is_empty() {
            "every project and category".to_owned()
        } else {
            parts.join(" · ")
        };
        EndpointRow { endpoint, filters }
    }
}

/// The endpoint form's fields as shown.
pub struct FormView {
    pub url: String,
    /// (name, meaning, ticked)
    pub events: Vec<(EventKind, &'static str, bool)>,
    pub slack: bool,
    pub projects: String,
    /// (category, ticked)
    pub categories: Vec<(Category, bool)>,
    pub description: String,
}

impl FormView {
    fn new(
        url: &str,
        events: &[EventKind],
        format: Format,
        projects: &[String],
        categories: &[Category],
        description: &str,
    ) -> FormView {
        FormView {
            url: url.to_owned(),
            events: EventKind::SUBSCRIBABLE
                .iter()
                .map(|k| (*k, k.describe(), events.contains(k)))
                .collect(),
            slack: format == Format::Slack,
            projects: projects.join(", "),
            categories: Category::ALL
                .iter()
                .map(|c| (*c, categories.contains(c)))
                .collect(),
            description: description.to_owned(),
        }
    }

    fn blank() -> FormView {
        FormView::new("", &EventKind::SUBSCRIBABLE, Format::Json, &[], &[], "")
    }

    fn of(e: &Endpoint) -> FormView {
        FormView::new(
            &e.url,
            &e.events,
            e.format,
            &e.projects,
            &e.categories,
            &e.description,
        )
    }

    /// The form as posted, shown again with why it was refused.
    fn posted(f: &WebhookForm) -> FormView {
        let events: Vec<EventKind> = f
            .all("events")
            .iter()
            .filter_map(|e| EventKind::parse(e))
            .collect();
        let categories: Vec<Category> = f
            .all("categories")
            .iter()
            .filter_map(|c| c.parse().ok())
            .collect();
        let mut view = FormView::new(
            f.get("url"),
            &events,
            Format::parse(f.get("format")).unwrap_or(Format::Json),
            &[],
            &categories,
            f.get("description"),
        );
        view.projects = f.get("projects").to_owned();
        view
    }
}

/// A posted endpoint form: its fields as pairs, since checkboxes repeat a name.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct WebhookForm(Vec<(String, String)>);

impl CsrfField for WebhookForm {
    fn csrf(&self) -> &str {
        self.get("csrf")
    }
}

impl WebhookForm {
    fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The request this form makes: every field it shows, the secret only when typed.
    fn request(&self) -> EndpointRequest {
        let projects = self
            .get("projects")
            .split([',', '\n'])
            .map(str::to_owned)
            .collect();
        let secret = self.get("secret").trim();
        EndpointRequest {
            url: Some(self.get("url").to_owned()),
            events: Some(self.all("events")),
            format: Some(match self.get("format") {
                "" => "json".to_owned(),
                f => f.to_owned(),
            }),
            projects: Some(projects),
            categories: Some(self.all("categories")),
            secret: (!secret.is_empty()).then(|| secret.to_owned()),
            description: Some(self.get("description").to_owned()),
            enabled: None,
        }
    }
}

/// `GET /webhooks`
#[derive(Template, WebTemplate)]
#[template(path = "webhooks.html")]
pub struct WebhooksPage {
    layout: Layout,
    endpoints: Vec<EndpointRow>,
    form: FormView,
    error: Option<String>,
    /// Where the form posts.
    action: String,
    editing: bool,
}

async fn list_page(
    state: &AppState,
    user: &PortalUser,
    form: FormView,
    error: Option<String>,
) -> Result<WebhooksPage, AppError> {
    Ok(WebhooksPage {
        layout: Layout::for_user(Some(user)),
        endpoints: webhooks::list(&state.db)
            .await?
            .into_iter()
            .map(EndpointRow::from)
            .collect(),
        form,
        error,
        action: "/webhooks".to_owned(),
        editing: false,
    })
}

/// `GET /webhooks`
pub async fn list_webhooks(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Admin>,
) -> Result<WebhooksPage, PageError> {
    Ok(list_page(&state, &user, FormView::blank(), None).await?)
}

/// The answer to a created endpoint: its secret, this once.
#[derive(Template, WebTemplate)]
#[template(path = "webhook_created.html")]
pub struct CreatedPage {
    layout: Layout,
    endpoint: EndpointRow,
    secret: String,
}

/// `POST /webhooks`: 200 with the secret, or the list again with why (422).
pub async fn create_webhook(
    State(state): State<AppState>,
    CsrfForm { user, form, .. }: CsrfForm<WebhookForm, Admin>,
) -> Result<Response, PageError> {
    match webhooks::create(&state.db, &state.webhooks, &form.request(), user.name()).await {
        Ok(created) => Ok(CreatedPage {
            layout: Layout::for_user(Some(&user)),
            endpoint: EndpointRow::from(created.endpoint),
            secret: created.secret,
        }
        .into_response()),
        Err(app::Error::Invalid(_, message)) => {
            let page = list_page(&state, &user, FormView::posted(&form), Some(message)).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// A delivery in the log.
pub struct DeliveryRow {
    pub id: i64,
    pub event: EventKind,
    pub state: DeliveryState,
    pub created_at: Timestamp,
    pub next_attempt_at: Option<Timestamp>,
    /// Each attempt's status (`None`: no response).
    pub statuses: Vec<Option<u16>>,
    pub last_error: String,
}

impl From<Delivery> for DeliveryRow {
    fn from(d: Delivery) -> Self {
        DeliveryRow {
            id: d.id,
            event: d.event,
            state: d.state,
            created_at: d.created_at,
            next_attempt_at: d.next_attempt_at,
            statuses: d.log.iter().map(|a| a.status).collect(),
            last_error: d.last_error,
        }
    }
}

/// `GET /webhooks/{id}`
#[derive(Template, WebTemplate)]
#[template(path = "webhook.html")]
pub struct WebhookPage {
    layout: Layout,
    endpoint: EndpointRow,
    form: FormView,
    error: Option<String>,
    deliveries: Vec<DeliveryRow>,
    max_attempts: u32,
    /// Where the form posts.
    action: String,
    editing: bool,
}

async fn endpoint_page(
    state: &AppState,
    user: &PortalUser,
    id: i64,
    posted: Option<(&WebhookForm, String)>,
) -> Result<WebhookPage, AppError> {
    let (endpoint, deliveries) = webhooks::deliveries(&state.db, id).await?;
    let (form, error) = match posted {
        Some((f, message)) => (FormView::posted(f), Some(message)),
        None => (FormView::of(&endpoint), None),
    };
    Ok(WebhookPage {
        layout: Layout::for_user(Some(user)),
        endpoint: EndpointRow::from(endpoint),
        form,
        error,
        deliveries: deliveries.into_iter().map(DeliveryRow::from).collect(),
        max_attempts: state.webhooks.max_attempts(),
        action: format!("/webhooks/{id}"),
        editing: true,
    })
}

/// `GET /webhooks/{id}`
pub async fn show_webhook(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Admin>,
    WebhookId(id): WebhookId,
) -> Result<WebhookPage, PageError> {
    Ok(endpoint_page(&state, &user, id, None).await?)
}

/// `POST /webhooks/{id}`: save the edit form.
pub async fn update_webhook(
    State(state): State<AppState>,
    WebhookId(id): WebhookId,
    CsrfForm { user, form, .. }: CsrfForm<WebhookForm, Admin>,
) -> Result<Response, PageError> {
    match webhooks::update(&state.db, &state.webhooks, id, &form.request()).await {
        Ok(_) => Ok(Redirect::to(&format!("/webhooks/{id}")).into_response()),
        Err(app::Error::Invalid(_, message)) => {
            let page = endpoint_page(&state, &user, id, Some((&form, message))).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// The small forms (enable/disable, send test, delete).
#[derive(Debug, Deserialize)]
pub struct ActionForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    enabled: String,
}

impl CsrfField for ActionForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /webhooks/{id}/enabled`: `enabled=true` or `false`.
pub async fn set_enabled(
    State(state): State<AppState>,
    WebhookId(id): WebhookId,
    CsrfForm { form, .. }: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    let request = EndpointRequest {
        enabled: Some(form.enabled == "true"),
        ..EndpointRequest::default()
    };
    webhooks::update(&state.db, &state.webhooks, id, &request).await?;
    Ok(Redirect::to(&format!("/webhooks/{id}")).into_response())
}

/// `POST /webhooks/{id}/test`: queue a test delivery.
pub async fn test_webhook(
    State(state): State<AppState>,
    WebhookId(id): WebhookId,
    _: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    webhooks::send_test(&state.db, id).await?;
    Ok(Redirect::to(&format!("/webhooks/{id}#deliveries")).into_response())
}

/// `POST /webhooks/{id}/delete`
pub async fn delete_webhook(
    State(state): State<AppState>,
    WebhookId(id): WebhookId,
    _: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    webhooks::delete(&state.db, id).await?;
    Ok(Redirect::to("/webhooks").into_response())
}
