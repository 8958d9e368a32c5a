//! The start page (`GET /`: paste or upload a log; the newest reports) and its form post
//! (`POST /reports`). The form is read here as it streams in (the log spooled under its cap,
//! the CSRF token checked before anything large is spooled), then stored by one call to
//! `app::reports::submit`; a refused submission gets the start page again with what was typed.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::super::Layout;
use crate::app::reports::{self, FormReport, ReportSummary, Submitted};
use crate::app::upload::{Limits, Uploader};
use crate::auth::Scope;
use crate::web::auth::{OptionalUser, PortalUser};
use crate::web::error::{AppError, PageError};
use crate::web::extract::MultipartForm;
use crate::web::limits::InFlight;
use crate::web::state::AppState;
use crate::web::uploads::{counted, file_name, multipart_error, read_small, spool};

/// `GET /`: paste or upload a log; the newest reports. After a refused submission the same
/// page comes back with what was typed and the reason next to the form.
#[derive(Template, WebTemplate)]
#[template(path = "home.html")]
pub struct HomePage {
    layout: Layout,
    recent: Vec<ReportSummary>,
    form: NewReportForm,
    /// Why the last submission was refused.
    error: Option<String>,
}

/// What the new-report form holds: empty on the start page, the submitted values when a
/// submission is refused.
#[derive(Debug, Default)]
pub struct NewReportForm {
    project: String,
    /// The pasted log, when it was small enough to send back ([`KEEP_PASTE`]).
    log_text: String,
    /// A log was chosen as a file (browsers cannot fill file inputs again).
    log_was_file: bool,
    /// A pasted log too long to send back.
    log_dropped: bool,
    script_text: String,
    repeats: String,
}

impl NewReportForm {
    /// The runs field's value: what was typed, else 1.
    #[must_use]
    pub fn repeats_value(&self) -> &str {
        if self.repeats.is_empty() {
            "1"
        } else {
            &self.repeats
        }
    }
}

/// The longest pasted log sent back into the form after a refusal.
const KEEP_PASTE: u64 = 256 * 1024;

/// `GET /`
pub async fn home(
    State(state): State<AppState>,
    OptionalUser(user): OptionalUser,
) -> Result<HomePage, PageError> {
    let recent = reports::start_list(&state.db, may_read(user.as_ref())).await?;
    Ok(home_page(
        user.as_ref(),
        recent,
        NewReportForm::default(),
        None,
    ))
}

/// Whether the start page lists the newest reports to `user`.
fn may_read(user: Option<&PortalUser>) -> bool {
    user.is_some_and(|u| u.require(&[Scope::Read]).is_ok())
}

fn home_page(
    user: Option<&PortalUser>,
    recent: Vec<ReportSummary>,
    form: NewReportForm,
    error: Option<String>,
) -> HomePage {
    HomePage {
        layout: Layout::for_user(user),
        recent,
        form,
        error,
    }
}

/// `POST /reports`: the start page's form (multipart: csrf, project, log file or pasted text,
/// optional script file or text). A submission refused for what it holds (nothing to classify,
/// a binary file, over a cap, a secret in the script) gets the start page again, the typed
/// values kept and the reason beside the form, with the refusal's status.
pub async fn create_report(
    State(state): State<AppState>,
    user: PortalUser,
    held: Option<axum::extract::Extension<InFlight>>,
    headers: HeaderMap,
    multipart: MultipartForm,
) -> Result<Response, PageError> {
    let reader = may_read(Some(&user));
    if let Err(refused) = user.require(&[Scope::Ingest]) {
        // 403 whatever the body; what was typed comes back (nothing is stored) with the scope
        // it needs.
        let mut form = NewReportForm::default();
        if let Some(mut multipart) = multipart.readable() {
            // A body that stops parsing keeps the fields read before it.
            let _ = read_back(&mut multipart, &mut form).await;
        }
        let reason = format!(
            "{refused}: submitting a report needs the ingest scope. What you typed is below; \
             ask an admin for a token with that scope."
        );
        let recent = reports::start_list(&state.db, reader).await?;
        let page = home_page(Some(&user), recent, form, Some(reason));
        return Ok((StatusCode::FORBIDDEN, page).into_response());
    }
    let mut multipart = multipart.fields()?;
    let mut form = NewReportForm::default();
    let read = read_form(
        state.limits.upload,
        &user,
        &headers,
        &mut multipart,
        &mut form,
    )
    .await;
    let (refusal, recent) = match read {
        Ok(parts) => {
            let uploader = Uploader {
                token_id: user.0.token_id(),
                person_id: user.0.person_id(),
                idempotency_key: None,
            };
            let (db, ruleset, limits) = (&state.db, state.ruleset.current(), &state.limits);
            let held = held.map(|e| e.0);
            match reports::submit(db, ruleset, limits, uploader, parts, held, reader).await? {
                Submitted::Stored(uploaded) => {
                    counted(&state, &uploaded);
                    let to = format!("/reports/{}", uploaded.report_id);
                    return Ok(Redirect::to(&to).into_response());
                }
                Submitted::Refused { reason, recent } => (AppError::from(reason), recent),
            }
        }
        // Refused while streaming in (a part over its cap).
        Err(
            err @ (AppError::Unprocessable(..)
            | AppError::UnsupportedMediaType(_)
            | AppError::TooLarge(_)),
        ) => (err, reports::start_list(&state.db, reader).await?),
        Err(err) => return Err(err.into()),
    };
    let (status, _) = refusal.status_and_code();
    let page = home_page(Some(&user), recent, form, Some(refusal.to_string()));
    Ok((status, page).into_response())
}

/// Reads the form's parts as they stream in, into `form` too (so a refusal can show them
/// again): the log spooled under its cap once the CSRF token read before it passed, the other
/// fields in memory under theirs. The CSRF token is checked again at the end (a form without
/// a log).
async fn read_form(
    limits: Limits,
    user: &PortalUser,
    headers: &HeaderMap,
    multipart: &mut Multipart,
    form: &mut NewReportForm,
) -> Result<FormReport, AppError> {
    let mut csrf = String::new();
    let mut log: Option<(std::fs::File, String)> = None;
    let mut script: Option<Vec<u8>> = None;
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "csrf" => {
                csrf = String::from_utf8_lossy(&read_small(field, 200, "csrf").await?).into_owned()
            }
            "project" => {
                form.project = String::from_utf8_lossy(&read_small(field, 200, "project").await?)
                    .trim()
                    .to_owned()
            }
            "repeats" => {
                form.repeats = String::from_utf8_lossy(&read_small(field, 20, "repeats").await?)
                    .trim()
                    .to_owned()
            }
            "log_file" | "log_text" => {
                // Check the CSRF token before spooling anything large.
                user.check_form(headers, &csrf)?;
                let filename = file_name(&field, "pasted.log");
                let mut file = spool(field, limits.max_log_bytes).await?;
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                if len > 0 && log.is_none() {
                    if name == "log_text" {
                        keep_paste(&mut file, len, form);
                    } else {
                        form.log_was_file = true;
                    }
                    log = Some((file, filename));
                }
            }
            "script_file" | "script_text" => {
                let bytes = read_small(field, limits.max_script_bytes, "script").await?;
                if !bytes.iter().all(u8::is_ascii_whitespace) && script.is_none() {
                    if name == "script_text" {
                        form.script_text = String::from_utf8_lossy(&bytes).into_owned();
                    }
                    script = Some(bytes);
                }
            }
            _ => {}
        }
    }
    user.check_form(headers, &csrf)?;
    Ok(FormReport {
        project: form.project.clone(),
        repeats: form.repeats.clone(),
        log,
        script,
    })
}

/// Reads a refused submission's fields back into `form`, storing nothing: each field's first
/// [`KEEP_PASTE`] bytes are kept, the rest read and dropped (the route's body limit bounds it).
async fn read_back(multipart: &mut Multipart, form: &mut NewReportForm) -> Result<(), AppError> {
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        let mut kept = Vec::new();
        let mut over = false;
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            if kept.len() + chunk.len() <= KEEP_PASTE as usize {
                kept.extend_from_slice(&chunk);
            } else {
                over = true;
            }
        }
        let text = |max: usize| {
            String::from_utf8_lossy(&kept)
                .trim()
                .chars()
                .take(max)
                .collect::<String>()
        };
        match name.as_str() {
            "project" => form.project = text(200),
            "repeats" => form.repeats = text(20),
            "log_text" if over => form.log_dropped = true,
            "log_text" => form.log_text = String::from_utf8_lossy(&kept).into_owned(),
            "log_file" if over || !kept.is_empty() => form.log_was_file = true,
            "script_text" => form.script_text = String::from_utf8_lossy(&kept).into_owned(),
            _ => {}
        }
    }
    Ok(())
}

/// Copies a pasted log of at most [`KEEP_PASTE`] bytes into the form (the spooled file is
/// rewound by the upload, so reading it here costs nothing else).
fn keep_paste(file: &mut std::fs::File, len: u64, form: &mut NewReportForm) {
    use std::io::{Read, Seek};
    if len > KEEP_PASTE {
        form.log_dropped = true;
        return;
    }
    let mut bytes = Vec::new();
    if file
        .rewind()
        .and_then(|()| file.read_to_end(&mut bytes))
        .is_ok()
    {
        form.log_text = String::from_utf8_lossy(&bytes).into_owned();
    }
}
