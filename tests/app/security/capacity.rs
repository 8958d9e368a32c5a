//! People hold capacity, not tokens (issue 38, SECURITY.md items 24, 25 and 28): a member's
//! tokens share one in-flight share however many they make, and tokens per person are capped;
//! an admin managing people keeps a reserved slot when every other slot is held; revoking a
//! token or disabling a person ends their uploads in flight and stores nothing (also when the
//! revocation happened elsewhere, as in another replica or the CLI); revocation by id is exact
//! (a token named "14" is not token 14, `01` is no id); no interleaving of two admins
//! disabling each other leaves the service without an admin; and a request's credentials are
//! checked once, so a database outage costs it one wait, not two.

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use gpu_triage::app::tokens::{self, CreateToken, TOKENS_PER_PERSON_MAX};
use gpu_triage::auth::Scope;
use gpu_triage::roles::PersonRole;
use gpu_triage::storage::people::{self, SignedIn};
use gpu_triage::web::limits::LoadLimits;
use http_body_util::Channel;
use tokio::task::JoinHandle;

use crate::support::{TestApp, TestResponse, send_to, wait_for_lock_wait, wait_until_async};

const OOM: &[u8] = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
const PART_HEAD: &[u8] =
    b"--b\r\nContent-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\n\r\n";

/// A person as a first sign-in through the provider would store them.
async fn person(app: &TestApp, name: &str, role: PersonRole) -> i64 {
    let email = format!("{name}@example.com");
    people::upsert_signed_in(
        app.db.pool(),
        SignedIn {
            issuer: "https://idp.example.com",
            subject: name,
            email: &email,
            name,
            role,
        },
    )
    .await
    .expect("store the person")
    .id
}

/// A token of person `owner` (as they would create it in the portal), as its secret.
async fn owned_token(app: &TestApp, owner: i64, name: &str) -> (i64, String) {
    let (record, secret) = tokens::create(
        &app.db,
        CreateToken {
            name: name.to_owned(),
            scopes: vec![Scope::Ingest, Scope::Read],
            owner_person_id: Some(owner),
            ..CreateToken::default()
        },
    )
    .await
    .expect("create the token");
    (record.id, secret)
}

/// An upload whose body stalls after its first bytes, until the sender sends the rest.
struct Stalled {
    tx: http_body_util::channel::Sender<Bytes>,
    task: JoinHandle<TestResponse>,
}

async fn stalled_upload(app: &TestApp, token: &str) -> Stalled {
    let (mut tx, body) = Channel::<Bytes>::new(1);
    let req = Request::post("/api/v1/reports")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "multipart/form-data; boundary=b")
        .body(Body::new(body))
        .expect("request");
    let task = tokio::spawn(send_to(app.router.clone(), req));
    let (first, second) = PART_HEAD.split_at(8);
    tx.send_data(Bytes::from_static(first))
        .await
        .expect("send the first bytes");
    // The channel holds one piece: this send returns once the server has begun reading the
    // body (the request was admitted), or fails once the request was refused and dropped.
    let _ = tx.send_data(Bytes::from_static(second)).await;
    Stalled { tx, task }
}

impl Stalled {
    /// Sends the rest of the body and the answer.
    async fn finish(mut self) -> TestResponse {
        // The request may have been answered already (ended); its body is then gone.
        let _ = (self.tx)
            .send_data(Bytes::from([OOM, b"\r\n--b--\r\n".as_slice()].concat()))
            .await;
        drop(self.tx);
        self.task.await.expect("upload task")
    }
}

fn classify(token: &str) -> Request<Body> {
    Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "text/plain")
        .body(Body::from(OOM))
        .expect("request")
}

fn post_as(token: &str, path: &str) -> Request<Body> {
    Request::post(path)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .expect("request")
}

/// Waits until `n` of `uploads` have been answered.
async fn answered(uploads: &[Stalled], n: usize, what: &str) {
    wait_until_async(std::time::Duration::from_secs(60), what, async || {
        uploads.iter().filter(|u| u.task.is_finished()).count() >= n
    })
    .await;
}

#[tokio::test]
async fn a_member_with_many_tokens_holds_one_share_an_admin_stops_them_and_their_uploads_end() {
    // 12 slots, 4 for each person or service token, 2 kept for admins; no rate limit.
    let app = TestApp::spawn_with(|s| {
        s.with_load_limits(&LoadLimits {
            per_token_per_minute: 0,
            max_in_flight: 12,
            max_in_flight_per_token: 4,
            admin_reserved: 2,
            ..LoadLimits::default()
        })
    })
    .await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let mia = person(&app, "mia", PersonRole::Member).await;
    let ben = person(&app, "ben", PersonRole::Member).await;
    let mut mias = Vec::new();
    for n in 0..4 {
        mias.push(owned_token(&app, mia, &format!("mia-{n}")).await.1);
    }
    let (_, bens) = owned_token(&app, ben, "ben-ci").await;

    // 4 stalled uploads on each of her 4 tokens: she holds her one share of 4, the other 12
    // are refused at once.
    let mut uploads = Vec::new();
    for token in &mias {
        for _ in 0..4 {
            uploads.push(stalled_upload(&app, token).await);
        }
    }
    answered(&uploads, 12, "the uploads beyond her share to be refused").await;
    let (refused, held): (Vec<_>, Vec<_>) = uploads.into_iter().partition(|u| u.task.is_finished());
    assert_eq!((refused.len(), held.len()), (12, 4));
    for upload in refused {
        let res = upload.task.await.expect("task");
        assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS, "{}", res.body);
        assert_eq!(res.error_code(), "token_busy");
    }
    // Another member and the admin are served meanwhile.
    assert_eq!(app.send(classify(&bens)).await.status, StatusCode::OK);
    assert_eq!(
        app.get_as(&admin, "/api/v1/people").await.status,
        StatusCode::OK
    );

    // Two service tokens fill every other slot: now ordinary requests are shed...
    let mut fillers = Vec::new();
    for name in ["svc-a", "svc-b"] {
        let token = app.token(name, &[Scope::Ingest]).await;
        for _ in 0..4 {
            fillers.push(stalled_upload(&app, &token).await);
        }
    }
    let shed = app.send(classify(&bens)).await;
    assert_eq!(
        shed.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        shed.body
    );
    assert_eq!(
        app.get_as(&admin, "/api/v1/search?q=x").await.error_code(),
        "overloaded",
        "only managing people and tokens has the reserve"
    );
    // ...but the admin still reaches the people API through the reserve and disables her.
    let disabled = app
        .send(post_as(&admin, &format!("/api/v1/people/{mia}/disable")))
        .await;
    assert_eq!(disabled.status, StatusCode::OK, "{}", disabled.body);

    // Her uploads in flight end at once, without their bodies, and store nothing.
    answered(&held, 4, "her uploads in flight to end").await;
    for upload in held {
        let res = upload.finish().await;
        assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{}", res.body);
        assert!(
            res.body.contains("revoked while it was in flight"),
            "{}",
            res.body
        );
    }
    assert_eq!(app.count("reports").await, 0);
    // The service tokens' uploads were not touched: they complete and are stored.
    for upload in fillers {
        assert_eq!(upload.finish().await.status, StatusCode::CREATED);
    }
    assert_eq!(
        app.count("reports").await,
        1,
        "eight copies of one log: one report"
    );
    assert_eq!(app.send(classify(&bens)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn revoking_one_token_ends_its_uploads_and_leaves_the_others_running() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let mia = person(&app, "mia", PersonRole::Member).await;
    let (leaked_id, leaked) = owned_token(&app, mia, "leaked").await;
    let (_, kept) = owned_token(&app, mia, "kept").await;
    let doomed = stalled_upload(&app, &leaked).await;
    let running = stalled_upload(&app, &kept).await;
    let res = app
        .send(
            Request::delete(format!("/api/v1/tokens/{leaked_id}"))
                .header("authorization", format!("Bearer {admin}"))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    wait_until_async(
        std::time::Duration::from_secs(30),
        "the revoked token's upload to end",
        async || doomed.task.is_finished(),
    )
    .await;
    assert_eq!(doomed.finish().await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(running.finish().await.status, StatusCode::CREATED);
    assert_eq!(app.count("reports").await, 1);
}

#[tokio::test]
async fn an_upload_whose_token_was_revoked_elsewhere_stores_nothing() {
    // Revoked by another replica or the CLI: this process's requests are not told, so the
    // upload's own transaction must find the token revoked.
    let app = TestApp::spawn().await;
    let ci = app.token("ci", &[Scope::Ingest]).await;
    let upload = stalled_upload(&app, &ci).await;
    let revoked = tokens::revoke(&app.db, tokens::TokenSelector::Name("ci"))
        .await
        .expect("revoke");
    assert_eq!(revoked.len(), 1);
    let res = upload.finish().await;
    assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{}", res.body);
    assert_eq!(res.error_code(), "unauthorized");
    assert_eq!(app.count("reports").await, 0);
}

#[tokio::test]
async fn a_person_holds_at_most_the_cap_of_tokens_even_when_asking_all_at_once() {
    let app = TestApp::spawn().await;
    let mia = person(&app, "mia", PersonRole::Member).await;
    let cap = usize::try_from(TOKENS_PER_PERSON_MAX).expect("small");
    let attempts = (0..cap + 5).map(|n| {
        let db = app.db.clone();
        tokio::spawn(async move {
            tokens::create(
                &db,
                CreateToken {
                    name: format!("t{n}"),
                    scopes: vec![Scope::Ingest],
                    owner_person_id: Some(mia),
                    ..CreateToken::default()
                },
            )
            .await
        })
    });
    let mut created = 0;
    let mut refused = Vec::new();
    for attempt in attempts.collect::<Vec<_>>() {
        match attempt.await.expect("task") {
            Ok(_) => created += 1,
            Err(e) => refused.push(e.to_string()),
        }
    }
    assert_eq!(created, cap, "{refused:?}");
    assert_eq!(refused.len(), 5);
    assert!(
        refused.iter().all(|e| e.contains("active tokens")),
        "{refused:?}"
    );
    // Revoking one makes room for one more.
    let first = tokens::list_for(
        &app.db,
        tokens::Manager::Owner {
            person_id: mia,
            role: PersonRole::Member,
        },
    )
    .await
    .expect("list")[0]
        .id;
    tokens::revoke_by_id(&app.db, first).await.expect("revoke");
    owned_token(&app, mia, "again").await;
}

#[tokio::test]
async fn revoking_by_id_never_revokes_a_token_whose_name_is_that_number() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let mia = person(&app, "mia", PersonRole::Member).await;
    let (id, _) = owned_token(&app, mia, "mia-ci").await;
    // An admin's service token named after the member's token id, and one named "01".
    let named = app.token(&id.to_string(), &[Scope::Admin]).await;
    let zero = app.token("01", &[Scope::Read]).await;
    let delete = |path: String| {
        Request::delete(path)
            .header("authorization", format!("Bearer {admin}"))
            .body(Body::empty())
            .expect("request")
    };
    // `0{id}` is no id at all: 404, and nothing is revoked.
    let res = app.send(delete(format!("/api/v1/tokens/0{id}"))).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
    let res = app.send(delete(format!("/api/v1/tokens/{id}"))).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["name"], "mia-ci");
    // The tokens named "{id}" and "01" still work.
    assert_eq!(
        app.get_as(&named, "/api/v1/people").await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.get_as(&zero, "/api/v1/search?q=x").await.status,
        StatusCode::OK
    );
    // Other ids are exact too: `01` does not reach person 1 or report 1.
    let res = app
        .send(post_as(&admin, &format!("/api/v1/people/0{mia}/disable")))
        .await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
    let stored = app
        .upload(&admin, &[("log", Some("a.log"), OOM)], None)
        .await;
    let report = stored.json()["id"].as_i64().expect("report id");
    assert_eq!(
        app.get_as(&admin, &format!("/api/v1/reports/{report}"))
            .await
            .status,
        StatusCode::OK
    );
    for spelling in [
        format!("0{report}"),
        format!("+{report}"),
        format!("{report}.0"),
    ] {
        let res = app
            .get_as(&admin, &format!("/api/v1/reports/{spelling}"))
            .await;
        assert_eq!(
            res.status,
            StatusCode::NOT_FOUND,
            "{spelling}: {}",
            res.body
        );
    }
}

#[tokio::test]
async fn two_admins_disabling_each_other_at_once_leave_one_admin() {
    let app = TestApp::spawn().await;
    let ana = person(&app, "ana", PersonRole::Admin).await;
    let bo = person(&app, "bo", PersonRole::Admin).await;
    // Hold both admins' rows so that both disables are under way before either can finish.
    let mut gate = app.db.pool().begin().await.expect("begin");
    sqlx::query("SELECT id FROM people WHERE id = ANY($1) FOR UPDATE")
        .bind(vec![ana, bo])
        .fetch_all(&mut *gate)
        .await
        .expect("lock");
    let (db_a, db_b) = (app.db.clone(), app.db.clone());
    let ana_disables_bo =
        tokio::spawn(async move { gpu_triage::app::people::disable(&db_a, bo, Some(ana)).await });
    let bo_disables_ana =
        tokio::spawn(async move { gpu_triage::app::people::disable(&db_b, ana, Some(bo)).await });
    wait_for_lock_wait(&app.db, "people").await;
    wait_until_async(
        std::time::Duration::from_secs(30),
        "both disables to wait on the admins' rows",
        async || {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock'",
            )
            .fetch_one(app.db.pool())
            .await
            .unwrap_or(0)
                >= 2
        },
    )
    .await;
    gate.rollback().await.expect("release");
    let outcomes = [
        ana_disables_bo.await.expect("task"),
        bo_disables_ana.await.expect("task"),
    ];
    let refused: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().err().map(ToString::to_string))
        .collect();
    assert_eq!(refused.len(), 1, "exactly one may win: {outcomes:?}");
    assert!(refused[0].contains("last enabled admin"), "{refused:?}");
    let enabled_admins: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM people WHERE role = 'admin' AND disabled_at IS NULL",
    )
    .fetch_one(app.db.pool())
    .await
    .expect("count");
    assert_eq!(enabled_admins, 1);
}

#[tokio::test]
async fn during_an_outage_a_request_checks_its_credentials_once() {
    // A "database" that accepts connections and never answers: each credential check is one
    // connection that waits out the pool's acquire timeout.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(socket);
        }
    });
    let options = sqlx::postgres::PgConnectOptions::new()
        .host("127.0.0.1")
        .port(port)
        .username("postgres")
        .database("gone");
    let app = TestApp::on(gpu_triage::storage::Db::connect_lazy(options, 4));
    let token = format!("gtr_{}", "7".repeat(64));
    let res = app.get_as(&token, "/api/v1/search?q=x").await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE, "{}", res.body);
    assert!(res.headers.contains_key("retry-after"));
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the token was checked more than once"
    );
    // A portal page with a session cookie: one check too.
    let page = app
        .send(
            Request::get("/groups")
                .header("cookie", format!("gt_session=gtr_{}", "8".repeat(64)))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(
        page.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        page.body
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}
