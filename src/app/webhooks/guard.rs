//! Server-side request forgery defences for webhook URLs. A webhook makes this server send
//! requests where an admin says, so by default it only reaches public addresses, judged by the
//! one policy of [`super::address`] at both ends: a URL must be `http(s)://` without credentials;
//! when it is saved its host is parsed as a browser would (every IPv4 spelling, IPv6 forms by the
//! address they carry) and a name is resolved with the system resolver (hosts file included);
//! and every delivery judges the host again, resolves the name again and connects only to the
//! public addresses it got (the addresses checked are the ones connected to, so a name that
//! re-resolves to an internal address later is refused then). `--webhook-allow-private` lifts
//! the address checks for deployments whose receivers live on the private network.

use std::net::SocketAddr;
use std::time::Duration;

use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

use super::address;

/// Longest URL accepted.
pub const MAX_URL_LEN: usize = 2000;

/// Checks an endpoint URL as saved: returns it trimmed, or why it is refused.
pub fn check_url(raw: &str, allow_private: bool) -> Result<String, String> {
    let url = raw.trim();
    if url.is_empty() {
        return Err("url is required".into());
    }
    if url.len() > MAX_URL_LEN || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "url must be at most {MAX_URL_LEN} characters without spaces or control characters"
        ));
    }
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("url is not a valid URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err("url must start with http:// or https://".into()),
    }
    let authority = uri
        .authority()
        .ok_or("url must name a host (https://host/path)")?;
    if authority.as_str().contains('@') {
        return Err(
            "url must not carry credentials (user:password@); use the secret to authenticate"
                .into(),
        );
    }
    let host = authority.host();
    if host.is_empty() {
        return Err("url must name a host (https://host/path)".into());
    }
    if !allow_private {
        address::check_host(host)?;
    }
    Ok(url.to_owned())
}

/// How long a save waits for the system resolver.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves the host of `url` (checked by [`check_url`]) when it is a name, and refuses it when
/// every address it resolves to is internal, as a delivery would. A name that does not resolve
/// now is kept: DNS may not know it yet, and each delivery resolves and judges it again.
#[tracing::instrument(name = "webhooks::check_resolved_url", skip_all, fields(allow_private = allow_private))]
pub async fn check_resolved_url(url: &str, allow_private: bool) -> Result<(), String> {
    if allow_private {
        return Ok(());
    }
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("url is not a valid URL: {e}"))?;
    let Some(name) = address::check_host(uri.host().unwrap_or_default())? else {
        return Ok(());
    };
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let resolved = resolve(&name, port).await;
    address::check_resolved(&name, &resolved).map(|_| ())
}

/// The addresses the system resolver gives for `name` (and for it without a trailing dot: a
/// resolver may or may not strip it); none when it fails or takes too long.
async fn resolve(name: &str, port: u16) -> Vec<SocketAddr> {
    let mut names = vec![name];
    if let Some(bare) = name.strip_suffix('.') {
        names.push(bare);
    }
    let mut resolved = Vec::new();
    for n in names {
        match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((n, port))).await {
            Ok(Ok(addrs)) => resolved.extend(addrs),
            Ok(Err(e)) => tracing::debug!(name = n, error = %e, "webhook host not resolved"),
            Err(_) => tracing::debug!(name = n, "webhook host resolution timed out"),
        }
    }
    resolved
}

/// A resolver that keeps only the addresses a webhook may reach: the system's lookup, then
/// every private address dropped (all of them kept with `allow_private`). A name with nothing
/// left is refused with a message saying why.
#[derive(Debug, Default)]
pub struct GuardedResolver {
    /// `--webhook-allow-private`.
    pub allow_private: bool,
    inner: DefaultResolver,
}

impl GuardedResolver {
    /// A resolver refusing private addresses unless `allow_private`.
    #[must_use]
    pub fn new(allow_private: bool) -> GuardedResolver {
        GuardedResolver {
            allow_private,
            inner: DefaultResolver::default(),
        }
    }
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let refused = |message: String| {
            ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                message,
            ))
        };
        let host = uri.host().unwrap_or_default();
        if !self.allow_private {
            address::check_host(host).map_err(refused)?;
        }
        let all = self.inner.resolve(uri, config, timeout)?;
        if self.allow_private {
            return Ok(all);
        }
        let found: Vec<SocketAddr> = all.iter().copied().collect();
        let mut kept = self.inner.empty();
        for addr in address::check_resolved(host, &found).map_err(refused)? {
            kept.push(addr);
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_for_scheme_credentials_and_private_literals() {
        let cases = [
            ("https://hooks.example.com/x", false, Ok(())),
            ("http://203.0.113.9/x", false, Err("203.0.113.9")),
            ("http://8.8.8.8:8080/hook", false, Ok(())),
            ("ftp://example.com/", false, Err("http:// or https://")),
            ("javascript:alert(1)", false, Err("http:// or https://")),
            ("https://u:p@example.com/", false, Err("credentials")),
            ("http://127.0.0.1:9000/", false, Err("127.0.0.1")),
            ("http://127.0.0.1:9000/", true, Ok(())),
            ("http://10.1.2.3/", false, Err("10.1.2.3")),
            (
                "http://169.254.169.254/latest",
                false,
                Err("169.254.169.254"),
            ),
            ("http://[::1]:80/", false, Err("::1")),
            ("http://[::ffff:192.168.1.1]/", false, Err("192.168.1.1")),
            ("http://[fd00::1]/", false, Err("fd00::1")),
            ("http://localhost:8080/", false, Err("this machine")),
            ("http://a.localhost/", false, Err("this machine")),
            ("https://exa mple.com/", false, Err("without spaces")),
            ("", false, Err("required")),
        ];
        for (url, allow, want) in cases {
            let got = check_url(url, allow);
            match want {
                Ok(()) => assert!(got.is_ok(), "{url}: {got:?}"),
                Err(part) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(part)),
                    "{url}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn a_delivery_judges_the_host_before_resolving_it() {
        use ureq::config::Config;
        let resolve = |url: &str, allow: bool| {
            let uri: ureq::http::Uri = url.parse().expect("uri");
            GuardedResolver::new(allow)
                .resolve(&uri, &Config::default(), NextTimeout::default())
                .map(|a| a.iter().map(|s| s.ip().to_string()).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        };
        // Literals only: nothing here asks a name server or connects anywhere.
        for url in [
            "http://[::127.0.0.1]/",
            "http://[2002:7f00:1::]/",
            "http://[64:ff9b::7f00:1]/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://[::ffff:10.0.0.1]:8080/",
        ] {
            let got = resolve(url, false);
            assert!(
                got.as_ref()
                    .is_err_and(|e| e.contains("--webhook-allow-private")),
                "{url}: {got:?}"
            );
        }
        assert_eq!(
            resolve("http://8.8.8.8/", false),
            Ok(vec!["8.8.8.8".into()])
        );
        assert_eq!(
            resolve("http://[2002:808:808::1]/", false),
            Ok(vec!["2002:808:808::1".into()])
        );
        assert_eq!(
            resolve("http://[::127.0.0.1]/", true),
            Ok(vec!["::7f00:1".into()])
        );
    }

    #[tokio::test]
    async fn a_save_resolves_names_with_the_system_resolver() {
        // `localhost` is in every hosts file (and refused by name before any lookup).
        let found = resolve("localhost.", 80).await;
        assert!(found.iter().any(|a| a.ip().is_loopback()), "{found:?}");
        let judged = address::check_resolved("localhost", &found);
        assert!(judged.is_err(), "{judged:?}");
        for url in [
            "http://localhost./x",
            "https://LOCALHOST:9/",
            "http://0x7f.1/",
        ] {
            let got = check_resolved_url(url, false).await;
            assert!(got.is_err(), "{url}: {got:?}");
        }
        assert_eq!(check_resolved_url("http://localhost/", true).await, Ok(()));
        assert_eq!(check_resolved_url("http://8.8.8.8/", false).await, Ok(()));
    }
}
