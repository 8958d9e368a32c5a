//! Starting a sign-in and coming back (issue 38, SECURITY.md item 27): `GET /login/oidc` is
//! rate limited per client address (IPv6 per /64) and in total, the sign-ins under way are
//! capped and expire, and a forged callback compares `state` before it changes anything, so
//! the real callback still finishes. Against the real provider, as the other sign-in tests.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::web::anonymous::ClientAddr;
use gpu_triage::web::sign_in_rate::{Bucket, SignInLimits, SignInRate};

use super::{Jar, PUBLIC_URL, app_get, app_with, at_provider, provider, start};
use crate::support::{TestApp, TestResponse};

/// `GET /login/oidc` from a client at `ip`.
async fn start_from(app: &TestApp, ip: &str) -> TestResponse {
    let addr: SocketAddr = format!("[{ip}]:40000")
        .parse()
        .or_else(|_| format!("{ip}:40000").parse())
        .unwrap();
    let mut req = Request::get("/login/oidc").body(Body::empty()).unwrap();
    req.extensions_mut().insert(ClientAddr(addr));
    app.send(req).await
}

/// Limits whose buckets do not refill within a test.
fn limits(per_address: u32, total: u32) -> SignInLimits {
    let hour = Duration::from_secs(3600);
    SignInLimits {
        per_address: Bucket {
            burst: per_address,
            every: hour,
        },
        total: Bucket {
            burst: total,
            every: hour,
        },
    }
}

fn retry_after(res: &TestResponse) -> u64 {
    res.headers
        .get("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After ({}): {}", res.status, res.body))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn pending(app: &TestApp) -> i64 {
    app.count("oidc_logins").await
}

#[tokio::test]
async fn starts_are_limited_per_address_and_ipv6_addresses_per_64() {
    let Some(provider) = provider("oidc::starts::per_address") else {
        return;
    };
    let app = app_with(&provider.issuer, |_, state| {
        state.sign_in_rate = SignInRate::new(limits(2, 1000)).into();
    })
    .await;
    for ip in ["192.0.2.1", "192.0.2.1"] {
        let res = start_from(&app, ip).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{ip}: {}", res.body);
    }
    let over = start_from(&app, "192.0.2.1").await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "{}", over.body);
    assert!(
        (1..=3600).contains(&retry_after(&over)),
        "{:?}",
        over.headers
    );
    assert!(
        over.body.contains("Too many sign-ins") && over.body.contains("your address"),
        "{}",
        over.body
    );
    assert!(
        over.body.contains("name=\"token\""),
        "token sign-in is still offered"
    );
    assert!(
        over.headers.get("set-cookie").is_none(),
        "no sign-in started"
    );
    assert_eq!(
        start_from(&app, "192.0.2.2").await.status,
        StatusCode::SEE_OTHER,
        "another address starts"
    );
    // One /64 is one client; the next /64 is another.
    for ip in ["2001:db8::1", "2001:db8::ffff:2"] {
        let res = start_from(&app, ip).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{ip}: {}", res.body);
    }
    assert_eq!(
        start_from(&app, "2001:db8::3").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        start_from(&app, "2001:db8:0:1::1").await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        pending(&app).await,
        6,
        "a row per start let through, none else"
    );
}

#[tokio::test]
async fn starts_are_limited_in_total_whatever_the_addresses() {
    let Some(provider) = provider("oidc::starts::total") else {
        return;
    };
    let app = app_with(&provider.issuer, |_, state| {
        state.sign_in_rate = SignInRate::new(limits(100, 3)).into();
    })
    .await;
    for ip in ["192.0.2.10", "192.0.2.11", "2001:db8:5::1"] {
        let res = start_from(&app, ip).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{ip}: {}", res.body);
    }
    let spent = start_from(&app, "192.0.2.12").await;
    assert_eq!(
        spent.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        spent.body
    );
    assert!(retry_after(&spent) >= 1);
    assert!(spent.body.contains("Too many sign-ins"), "{}", spent.body);
    assert!(spent.body.contains("name=\"token\""));
    assert_eq!(pending(&app).await, 3);
}

#[tokio::test]
async fn pending_sign_ins_are_capped_and_expired_ones_removed_and_refused() {
    let Some(provider) = provider("oidc::starts::pending_cap") else {
        return;
    };
    provider.set_groups(&[("ana", &["everyone"])]);
    let app = app_with(&provider.issuer, |settings, _| settings.max_pending = 3).await;
    for _ in 0..3 {
        start(&app, &mut Jar::default(), "").await;
    }
    let mut refused = Jar::default();
    let full = app_get(&app, &mut refused, "/login/oidc").await;
    assert_eq!(
        full.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        full.body
    );
    assert!(retry_after(&full) >= 1);
    assert!(full.body.contains("under way"), "{}", full.body);
    assert!(refused.get("gt_oidc").is_none());
    assert_eq!(pending(&app).await, 3, "the cap holds");

    // Ten minutes on, the three have expired: the next start removes them and gets in.
    age_pending(&app).await;
    start(&app, &mut Jar::default(), "").await;
    assert_eq!(pending(&app).await, 1, "expired sign-ins are removed");

    // A sign-in whose pending row expired while the person was at the provider is refused.
    let mut jar = Jar::default();
    let authorize = start(&app, &mut jar, "").await;
    let back = at_provider(&provider.issuer, &authorize, "ana");
    age_pending(&app).await;
    let res = app_get(&app, &mut jar, back.strip_prefix(PUBLIC_URL).unwrap()).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    assert!(res.body.contains("expired"), "{}", res.body);
    assert!(jar.get("gt_session").is_none());
    assert_eq!(app.count("people").await, 0);
    assert_eq!(pending(&app).await, 1, "the expired row met is removed");
}

/// Moves every sign-in under way past its expiry.
async fn age_pending(app: &TestApp) {
    sqlx::query("UPDATE oidc_logins SET expires_at = now() - interval '1 second'")
        .execute(app.db.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_forged_callback_leaves_the_real_sign_in_able_to_finish() {
    let Some(provider) = provider("oidc::starts::forged_callback") else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team"])]);
    let app = super::app_for(&provider.issuer).await;
    let mut jar = Jar::default();
    let authorize = start(&app, &mut jar, "").await;
    let back = at_provider(&provider.issuer, &authorize, "ana");
    // An attacker sends the person's browser (it carries the pending cookie) to the callback
    // with a code and state of their own, then with a provider error.
    for forged in [
        "/login/oidc/callback?code=attackers-code&state=attackers-state",
        "/login/oidc/callback?error=access_denied&state=attackers-state",
    ] {
        let res = app_get(&app, &mut jar, forged).await;
        assert_eq!(
            res.status,
            StatusCode::BAD_REQUEST,
            "{forged}: {}",
            res.body
        );
        assert!(jar.get("gt_session").is_none());
        assert!(
            jar.get("gt_oidc").is_some(),
            "{forged}: the pending cookie is kept"
        );
        assert_eq!(pending(&app).await, 1, "{forged}: the pending row is kept");
    }
    let real = app_get(&app, &mut jar, back.strip_prefix(PUBLIC_URL).unwrap()).await;
    assert_eq!(real.status, StatusCode::SEE_OTHER, "{}", real.body);
    assert!(jar.get("gt_session").is_some(), "the real sign-in finished");
    assert_eq!(pending(&app).await, 0);
}
