//! The network guard: trawl must not be turned into a proxy into the network it runs in (SSRF).
//!
//! IP-literal hosts are checked before a request is made; host names are resolved by
//! [`GuardedResolver`], which hands reqwest only the addresses that passed, so the connection goes
//! to a checked address and a second, rebinding DNS answer cannot slip past.

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use thiserror::Error;

/// A host refused by the guard, with the class of its address (see [`forbidden_class`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{host} is (or resolves only to) a {class} address")]
pub struct BlockedAddress {
    pub host: String,
    pub class: &'static str,
}

/// Whether connecting to `ip` is refused: loopback, private, link-local (the cloud metadata
/// address 169.254.169.254 among them), CGNAT, multicast, unspecified, broadcast, reserved and
/// documentation ranges, and IPv6 forms that embed any of these.
pub fn is_forbidden(ip: IpAddr) -> bool {
    forbidden_class(ip).is_some()
}

/// The class of address the guard refuses `ip` as (`loopback`, `private`, `link-local` …), or
/// None when it may be fetched: what a user is told when a crawl is refused.
pub fn forbidden_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_class_v4(v4),
        IpAddr::V6(v6) => forbidden_class_v6(v6),
    }
}

fn forbidden_class_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let class = if ip.is_loopback() {
        "loopback"
    } else if ip.is_private() {
        "private"
    } else if ip.is_link_local() {
        "link-local"
    } else if a == 100 && (64..128).contains(&b) {
        "CGNAT" // 100.64.0.0/10
    } else if ip.is_multicast() {
        "multicast"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_broadcast() {
        "broadcast"
    } else if ip.is_documentation() {
        "documentation"
    } else if a == 0 // "this network"
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18.0.0/15
        || a >= 240
    {
        "reserved"
    } else {
        return None;
    };
    Some(class)
}

fn forbidden_class_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return forbidden_class_v4(v4);
    }
    let [first, second, ..] = ip.segments();
    let class = if ip.is_loopback() {
        "loopback"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_multicast() {
        "multicast"
    } else if (first & 0xfe00) == 0xfc00 {
        "private" // unique local fc00::/7
    } else if (first & 0xffc0) == 0xfe80 {
        "link-local" // fe80::/10
    } else if (first & 0xffc0) == 0xfec0 {
        "private" // deprecated site-local fec0::/10
    } else if first == 0x2001 && second == 0x0db8 {
        "documentation"
    } else {
        return None;
    };
    Some(class)
}

/// The IPv4 address carried by IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6 addresses.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        // IPv4-compatible (deprecated); `::` and `::1` are handled as IPv6.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// Whether a request to `url` may be sent, as far as its host is an IP literal: names are left to
/// [`GuardedResolver`]. `exempt` lists `ip:port` socket addresses the guard lets through.
pub(crate) fn check_literal(url: &url::Url, exempt: &[String]) -> Result<(), BlockedAddress> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    let Some(class) = forbidden_class(ip) else {
        return Ok(());
    };
    let port = url.port_or_known_default().unwrap_or(0);
    let target = SocketAddr::new(ip, port);
    let exempted = exempt
        .iter()
        .any(|e| e.trim().parse::<SocketAddr>().is_ok_and(|a| a == target));
    if exempted {
        Ok(())
    } else {
        Err(BlockedAddress {
            host: url.host_str().unwrap_or_default().to_owned(),
            class,
        })
    }
}

/// Resolves `host` and fails unless one of its addresses may be fetched: the check a request
/// sent through a proxy gets (the proxy, not trawl, connects to the target). The addresses
/// that passed are returned.
pub(crate) async fn check_resolved(host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
    let resolved = tokio::net::lookup_host((host, port))
        .await
        .map_err(ResolveError::Lookup)?;
    allowed_addresses(host, resolved).map_err(ResolveError::Blocked)
}

/// Why a target host could not be checked.
#[derive(Debug, Error)]
pub(crate) enum ResolveError {
    #[error("cannot resolve: {0}")]
    Lookup(std::io::Error),
    #[error(transparent)]
    Blocked(BlockedAddress),
}

fn allowed_addresses(
    host: &str,
    resolved: impl Iterator<Item = SocketAddr>,
) -> Result<Vec<SocketAddr>, BlockedAddress> {
    let mut refused = None;
    let allowed: Vec<SocketAddr> = resolved
        .filter(|a| match forbidden_class(a.ip()) {
            Some(class) => {
                refused.get_or_insert(class);
                false
            }
            None => true,
        })
        .collect();
    if allowed.is_empty() {
        // An empty answer is refused too; it has no class to name.
        return Err(BlockedAddress {
            host: host.to_owned(),
            class: refused.unwrap_or("forbidden"),
        });
    }
    Ok(allowed)
}

/// A DNS resolver that drops forbidden addresses and fails when none is left, except for one
/// host name it resolves as is: the proxy a client goes through, allowed explicitly.
#[derive(Debug, Default, Clone)]
pub(crate) struct GuardedResolver {
    exempt_host: Option<std::sync::Arc<str>>,
}

impl GuardedResolver {
    /// A resolver that lets `host` (a proxy's name) resolve to any address.
    pub(crate) fn exempting(host: &str) -> Self {
        Self {
            exempt_host: Some(host.to_ascii_lowercase().into()),
        }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let exempt = self
            .exempt_host
            .as_deref()
            .is_some_and(|e| e.eq_ignore_ascii_case(&host));
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            if exempt {
                return Ok(Box::new(resolved.collect::<Vec<_>>().into_iter()) as Addrs);
            }
            match allowed_addresses(&host, resolved) {
                Ok(allowed) => Ok(Box::new(allowed.into_iter()) as Addrs),
                // Boxed as itself, so that `classify` finds it in the error's causes.
                Err(blocked) => Err(Box::new(blocked) as Box<_>),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(s: &str) -> bool {
        is_forbidden(s.parse().unwrap())
    }

    #[test]
    fn internal_addresses_are_forbidden_in_every_spelling() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "192.0.2.7",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
        ] {
            assert!(forbidden(ip), "{ip} should be forbidden");
        }
    }

    #[test]
    fn refused_addresses_are_named_by_class() {
        for (ip, class) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("10.1.2.3", "private"),
            ("fd12:3456::1", "private"),
            ("169.254.169.254", "link-local"),
            ("::ffff:169.254.169.254", "link-local"),
            ("100.64.0.1", "CGNAT"),
            ("0.0.0.0", "unspecified"),
            ("240.0.0.1", "reserved"),
        ] {
            assert_eq!(forbidden_class(ip.parse().unwrap()), Some(class), "{ip}");
        }
        assert_eq!(forbidden_class("8.8.8.8".parse().unwrap()), None);
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!forbidden(ip), "{ip} should pass");
        }
    }

    #[test]
    fn literal_hosts_are_checked_with_exemptions_by_socket_address() {
        let url = |s: &str| url::Url::parse(s).unwrap();
        let exempt = vec!["127.0.0.1:8080".to_owned()];
        assert!(check_literal(&url("http://127.0.0.1:8080/x"), &exempt).is_ok());
        assert!(check_literal(&url("http://127.0.0.1:8081/x"), &exempt).is_err());
        let metadata = check_literal(&url("http://169.254.169.254/"), &exempt).unwrap_err();
        assert_eq!(
            metadata.to_string(),
            "169.254.169.254 is (or resolves only to) a link-local address"
        );
        // WHATWG parsing turns numeric spellings into the IPv4 address they mean.
        assert!(check_literal(&url("http://2130706433/"), &[]).is_err());
        assert!(check_literal(&url("http://[::ffff:7f00:1]/"), &[]).is_err());
        assert!(check_literal(&url("http://example.com/"), &[]).is_ok());
        assert!(check_literal(&url("http://8.8.8.8/"), &[]).is_ok());
    }
}
