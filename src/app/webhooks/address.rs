//! The one address policy for outbound requests (SECURITY.md item 20), applied when a webhook is
//! saved and again when a delivery connects. An internal address has many spellings, and a check
//! that compares strings misses them: a host is therefore read the way the WHATWG URL parser reads
//! it (`url::Host::parse`: percent-decoding, IDNA, and every IPv4 form that it and `inet_aton`
//! accept: decimal `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`, one to four parts, a trailing
//! dot), and an IPv6 address is judged by the IPv4 address it carries (mapped, compatible,
//! SIIT-translated, NAT64, 6to4, Teredo) or by the scope its zone id names. Names are resolved
//! by the caller (the system resolver reads the hosts file) and every address they give is judged
//! by [`is_public`]. Pure: no network, no state.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a URL's host names, once parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A literal address in any of its spellings.
    Ip(IpAddr),
    /// A name to resolve (lower case, as the URL parser leaves it).
    Name(String),
}

/// The end of every refusal: what lifts it.
const NEEDS_FLAG: &str = "such destinations need the server's --webhook-allow-private";

/// Parses `host` (as a URL carries it: brackets around IPv6, percent-encoding allowed) the way
/// a browser's URL parser would; a host that looks like an address but is not one, or an IPv6
/// address with a zone id, is refused with the reason.
pub fn parse_host(host: &str) -> Result<Host, String> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'))
        && let Some((addr, _zone)) = inner.split_once('%')
    {
        // A zone id only means something for a scoped (link-local) address: whatever address
        // precedes it, the request would leave through a local interface.
        return Err(format!(
            "url points at {addr} with a zone id, a link-local scope on this machine; {NEEDS_FLAG}"
        ));
    }
    match url::Host::parse(host) {
        Ok(url::Host::Ipv4(v4)) => Ok(Host::Ip(IpAddr::V4(v4))),
        Ok(url::Host::Ipv6(v6)) => Ok(Host::Ip(IpAddr::V6(v6))),
        Ok(url::Host::Domain(name)) => Ok(Host::Name(name)),
        Err(e) => Err(format!("url host {host:?} is not valid: {e}")),
    }
}

/// Judges `host` without resolving it: `Ok(None)` for an allowed address, `Ok(Some(name))` for
/// a name the caller must resolve and judge with [`check_resolved`], or why it is refused.
pub fn check_host(host: &str) -> Result<Option<String>, String> {
    match parse_host(host)? {
        Host::Ip(ip) => check_ip(ip, host).map(|()| None),
        Host::Name(name) => {
            // RFC 6761: `localhost` and every name under it are this machine, whatever a
            // resolver says, with or without the trailing dot of a fully qualified name.
            let bare = name.strip_suffix('.').unwrap_or(&name);
            if bare == "localhost" || bare.ends_with(".localhost") {
                return Err(format!("url points at {host}, this machine; {NEEDS_FLAG}"));
            }
            Ok(Some(name))
        }
    }
}

/// Refuses `ip` (written `spelled` in the URL) unless it is public, naming the IPv4 address an
/// IPv6 one carries when that is what decided.
pub fn check_ip(ip: IpAddr, spelled: &str) -> Result<(), String> {
    if is_public(ip) {
        return Ok(());
    }
    let written = spelled.trim_start_matches('[').trim_end_matches(']');
    let shown = if written.eq_ignore_ascii_case(&ip.to_string()) {
        ip.to_string()
    } else {
        format!("{ip} (written {spelled})")
    };
    let carried = match ip {
        IpAddr::V6(v6) => carried_ipv4(v6)
            .into_iter()
            .flatten()
            .flatten()
            .find(|v4| !is_public_v4(*v4))
            .map(|v4| format!(", which carries {v4},"))
            .unwrap_or_default(),
        IpAddr::V4(_) => String::new(),
    };
    Err(format!(
        "url points at {shown}{carried} a loopback, private, link-local or reserved address; \
         {NEEDS_FLAG}"
    ))
}

/// The addresses a name resolved to that a request may reach, or why none is left: the same
/// rule when an endpoint is saved and when a delivery connects (only these are connected to).
pub fn check_resolved(
    name: &str,
    resolved: &[std::net::SocketAddr],
) -> Result<Vec<std::net::SocketAddr>, String> {
    let kept: Vec<_> = resolved
        .iter()
        .copied()
        .filter(|a| is_public(a.ip()))
        .collect();
    if kept.is_empty() && !resolved.is_empty() {
        let found: Vec<String> = resolved.iter().map(|a| a.ip().to_string()).collect();
        return Err(format!(
            "{name} resolves only to loopback, private, link-local or reserved addresses ({}); \
             refused without --webhook-allow-private",
            found.join(", ")
        ));
    }
    Ok(kept)
}

/// Whether `ip` is a public unicast address. IPv4: not loopback, private (RFC 1918), link-local,
/// carrier-grade NAT, unspecified, `0/8`, multicast, broadcast, documentation, benchmarking,
/// protocol assignments, the 6to4 relay anycast or reserved. IPv6: global unicast (`2000::/3`)
/// outside its documentation and protocol-assignment blocks, and a form that carries an IPv4
/// address only when every address it carries is public.
#[must_use]
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
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
        || a == 0 // "this network", 0.0.0.0/8: Linux connects 0.x to this machine
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT, 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments, 192.0.0.0/24
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast, 192.88.99.0/24
        || (a == 198 && (b == 18 || b == 19)) // benchmarking, 198.18.0.0/15
        || a >= 240) // reserved, 240.0.0.0/4
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if ip.is_unspecified() || ip.is_loopback() {
        return false;
    }
    if let Some(carried) = carried_ipv4(ip) {
        return carried.iter().flatten().all(|v4| is_public_v4(*v4));
    }
    let s = ip.segments();
    // Only global unicast is public; this also refuses unique local (fc00::/7), link-local
    // (fe80::/10), site-local, multicast, discard (100::/64) and the reserved blocks.
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments, 2001::/23
        && !(s[0] == 0x2001 && s[1] == 0x0db8) // documentation, 2001:db8::/32
        && !(s[0] == 0x3fff && s[1] < 0x1000) // documentation, 3fff::/20
}

/// The IPv4 addresses an IPv6 address carries, when it is one of the forms that does (`None`
/// otherwise): IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, SIIT-translated
/// `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::` (bits 16-48), and
/// Teredo `2001:0:SSSS:SSSS:...:CCCC:CCCC` (the server in bits 32-64, the client in the last 32
/// bits inverted). A local-use NAT64 prefix (`64:ff9b:1::/48`) or the rest of `64:ff9b::/32`
/// carries an address at a place only its network knows: it is reported as `0.0.0.0`, which is
/// never public.
#[must_use]
pub fn carried_ipv4(ip: Ipv6Addr) -> Option<[Option<Ipv4Addr>; 2]> {
    let s = ip.segments();
    let o = ip.octets();
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let one = |v4| Some([Some(v4), None]);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] => one(last),
        [0, 0, 0, 0, 0xffff, 0, _, _] => one(last),
        [0x0064, 0xff9b, 0, 0, 0, 0, _, _] => one(last),
        [0x0064, 0xff9b, ..] => one(Ipv4Addr::UNSPECIFIED),
        [0x2002, ..] => one(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        [0x2001, 0, ..] => {
            let server = Ipv4Addr::new(o[4], o[5], o[6], o[7]);
            let client = Ipv4Addr::new(!o[12], !o[13], !o[14], !o[15]);
            Some([Some(server), Some(client)])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each spelling of an internal destination an attack pass got saved, and others of the
    /// same families, with public addresses in the same forms that must stay allowed.
    #[test]
    fn every_spelling_of_a_host_is_judged_by_the_address_it_names() {
        let refused = [
            ("2130706433", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("0X7F000001", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("017700000001", "127.0.0.1"),
            ("0x7f.0.0.1", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("127.0.1", "127.0.0.1"),
            ("0", "0.0.0.0"),
            ("0.0.0.0", "0.0.0.0"),
            ("127.0.0.1.", "127.0.0.1"),
            ("%31%32%37.0.0.1", "127.0.0.1"),
            ("10.0.0.7", "10.0.0.7"),
            ("012.0.0.7", "10.0.0.7"),
            ("167772167", "10.0.0.7"),
            ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
            ("2852039166", "169.254.169.254"),
            ("0xc0a80001", "192.168.0.1"),
            ("100.64.0.1", "100.64.0.1"),
            ("localhost", "this machine"),
            ("localhost.", "this machine"),
            ("LocalHost", "this machine"),
            ("api.localhost", "this machine"),
            ("api.localhost.", "this machine"),
            ("[::1]", "::1"),
            ("[::]", "::"),
            ("[::127.0.0.1]", "carries 127.0.0.1"),
            ("[::7f00:1]", "carries 127.0.0.1"),
            ("[::ffff:127.0.0.1]", "carries 127.0.0.1"),
            ("[::ffff:10.1.2.3]", "carries 10.1.2.3"),
            ("[::ffff:0:127.0.0.1]", "carries 127.0.0.1"),
            ("[2002:7f00:1::]", "carries 127.0.0.1"),
            ("[2002:a9fe:a9fe::1]", "carries 169.254.169.254"),
            ("[64:ff9b::127.0.0.1]", "carries 127.0.0.1"),
            ("[64:ff9b::a00:7]", "carries 10.0.0.7"),
            ("[64:ff9b:1::8.8.8.8]", "carries 0.0.0.0"),
            // Teredo: server 65.54.227.120, client 127.0.0.1 (inverted: 80ff:fffe).
            (
                "[2001:0:4136:e378:8000:63bf:80ff:fffe]",
                "carries 127.0.0.1",
            ),
            // Teredo with a private server.
            ("[2001:0:a00:1::1]", "carries 10.0.0.1"),
            ("[fe80::1%25lo]", "zone id"),
            ("[fe80::1%25eth0]", "zone id"),
            ("[2606:4700::1111%25eth0]", "zone id"),
            ("[fe80::1]", "fe80::1"),
            ("[fd00::1]", "fd00::1"),
            ("[fc00::1]", "fc00::1"),
            ("[ff02::1]", "ff02::1"),
            ("[fec0::1]", "fec0::1"),
            ("[100::1]", "100::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("[2001:2::1]", "2001:2::1"),
            ("[3fff::1]", "3fff::1"),
            ("1.2.3.4.5", "not valid"),
            ("256.0.0.1", "not valid"),
            ("08.0.0.1", "not valid"),
            ("0x100000000", "not valid"),
        ];
        for (host, want) in refused {
            let got = check_host(host);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(want)),
                "{host}: {got:?}, want a refusal naming {want:?}"
            );
            if want != "not valid" {
                let message = got.err().unwrap_or_default();
                assert!(message.contains("--webhook-allow-private"), "{message}");
            }
        }
        let allowed = [
            ("8.8.8.8", None),
            ("134744072", None), // 8.8.8.8 in decimal
            ("0x8.0x8.0x8.0x8", None),
            ("1.1.1.1.", None),
            ("151.101.1.69", None),
            ("[2606:4700::1111]", None),
            ("[2a00:1450:4001:80b::200e]", None),
            ("[::ffff:8.8.8.8]", None),
            ("[::8.8.8.8]", None),
            ("[2002:808:808::1]", None),
            ("[64:ff9b::8.8.8.8]", None),
            ("[2001:0:4136:e378:8000:63bf:f7f7:f7f7]", None), // Teredo client 8.8.8.8
            ("hooks.example.com", Some("hooks.example.com")),
            ("Hooks.Example.COM", Some("hooks.example.com")),
            ("localhost.example.com", Some("localhost.example.com")),
            ("vm", Some("vm")),
        ];
        for (host, want) in allowed {
            assert_eq!(
                check_host(host),
                Ok(want.map(str::to_owned)),
                "{host} must stay allowed"
            );
        }
    }

    #[test]
    fn a_name_is_refused_only_when_every_address_it_resolves_to_is_internal() {
        let addrs = |list: &[&str]| -> Vec<std::net::SocketAddr> {
            list.iter()
                .map(|a| std::net::SocketAddr::new(a.parse().expect("ip"), 443))
                .collect()
        };
        let loopback = check_resolved("vm", &addrs(&["127.0.0.1", "::1"]));
        assert!(
            loopback
                .as_ref()
                .is_err_and(|e| e.contains("vm resolves only to")
                    && e.contains("127.0.0.1, ::1")
                    && e.contains("--webhook-allow-private")),
            "{loopback:?}"
        );
        let compat = check_resolved("x", &addrs(&["::127.0.0.1", "2002:7f00:1::"]));
        assert!(compat.is_err(), "{compat:?}");
        assert_eq!(
            check_resolved("mixed", &addrs(&["10.0.0.1", "8.8.8.8"])),
            Ok(addrs(&["8.8.8.8"]))
        );
        assert_eq!(check_resolved("none", &[]), Ok(Vec::new()));
    }

    #[test]
    fn ipv6_forms_carry_the_ipv4_addresses_they_embed() {
        let v4 = |s: &str| Some(s.parse::<Ipv4Addr>().expect("v4"));
        let cases = [
            ("::ffff:1.2.3.4", Some([v4("1.2.3.4"), None])),
            ("::1.2.3.4", Some([v4("1.2.3.4"), None])),
            ("::ffff:0:1.2.3.4", Some([v4("1.2.3.4"), None])),
            ("64:ff9b::1.2.3.4", Some([v4("1.2.3.4"), None])),
            ("2002:102:304::", Some([v4("1.2.3.4"), None])),
            (
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                Some([v4("65.54.227.120"), v4("192.0.2.45")]),
            ),
            ("2606:4700::1111", None),
            ("fe80::1", None),
        ];
        for (ip, want) in cases {
            assert_eq!(carried_ipv4(ip.parse().expect("ip")), want, "{ip}");
        }
    }
}
