//! Server-side request forgery defences for webhook URLs. A webhook makes this server send
//! requests where an admin says, so by default it only reaches public addresses: a URL must be
//! `http(s)://` without credentials, a literal private address or `localhost` is refused when
//! the endpoint is saved, and every delivery resolves the name again and connects only to the
//! public addresses it got (the addresses checked are the ones connected to, so a name that
//! re-resolves to an internal address later is refused then). `--webhook-allow-private` lifts
//! the address checks for deployments whose receivers live on the private network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

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
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>()
            && !is_public(ip)
        {
            return Err(format!(
                "url points at {ip}, a loopback, private or link-local address; \
                 such destinations need the server's --webhook-allow-private"
            ));
        }
        let lower = host.to_ascii_lowercase();
        if lower == "localhost" || lower.ends_with(".localhost") {
            return Err(format!(
                "url points at {host}, this machine; such destinations need the server's \
                 --webhook-allow-private"
            ));
        }
    }
    Ok(url.to_owned())
}

/// Whether `ip` is a public unicast address: not loopback, private (RFC 1918, unique local),
/// link-local, carrier-grade NAT, unspecified, multicast, broadcast, documentation or reserved.
#[must_use]
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT, 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments, 192.0.0.0/24
        || (a == 198 && (b == 18 || b == 19)) // benchmarking, 198.18.0.0/15
        || a >= 240) // reserved, 240.0.0.0/4
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local, fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
        || (first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation, 2001:db8::/32
        || (first == 0x0064 && ip.segments()[1] == 0xff9b)) // NAT64, may reach IPv4 internals
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
        let all = self.inner.resolve(uri, config, timeout)?;
        if self.allow_private {
            return Ok(all);
        }
        let mut kept = self.inner.empty();
        for addr in all.iter().filter(|a| is_public(a.ip())) {
            kept.push(*addr);
        }
        if kept.is_empty() {
            let found: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
            return Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} resolves only to loopback, private or link-local addresses ({}); \
                     refused without --webhook-allow-private",
                    uri.host().unwrap_or(""),
                    found.join(", ")
                ),
            )));
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
    fn public_addresses_are_told_from_internal_ones() {
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "151.101.1.69"] {
            assert!(is_public(ip.parse().expect("ip")), "{ip}");
        }
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!is_public(ip.parse().expect("ip")), "{ip}");
        }
    }
}
