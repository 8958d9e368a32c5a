//! How often sign-ins through the identity provider may start (SECURITY.md item 27). Anyone
//! may `GET /login/oidc`, and each start costs a request to the provider and a stored pending
//! sign-in, so starts are token buckets: one per client address ([`ClientKey`]: an IPv4
//! address or an IPv6 /64) and one in total. An address over its share gets 429, everyone gets
//! 503 when the total is spent; both say when to retry.
//!
//! Written apart from the API's per-token limiter: this one is keyed by address, must bound
//! its memory however many addresses an attacker holds, and is consumed only when both buckets
//! have a start to give.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::anonymous::ClientKey;

/// The most addresses remembered. Past it, addresses whose bucket has refilled are forgotten
/// (a full bucket is what a new address gets anyway); if none has, the start is refused as if
/// the total were spent.
const MAX_CLIENTS: usize = 10_000;

/// A token bucket's shape: `burst` starts at once, then one more every `every`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub burst: u32,
    pub every: Duration,
}

/// The limits on starting a sign-in through the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignInLimits {
    /// Per client address: 20 at once, then one every 2 s (a team behind one proxy signing in
    /// at nine still gets in within a minute or two).
    pub per_address: Bucket,
    /// For everyone together: 100 at once, then five a second (at most 3,000 starts in the ten
    /// minutes a pending sign-in lives, the pending cap).
    pub total: Bucket,
}

impl Default for SignInLimits {
    fn default() -> Self {
        SignInLimits {
            per_address: Bucket {
                burst: 20,
                every: Duration::from_secs(2),
            },
            total: Bucket {
                burst: 100,
                every: Duration::from_millis(200),
            },
        }
    }
}

/// Why a start was refused, and in how many seconds to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// This address used its share (429).
    Address { retry_after_secs: u64 },
    /// All addresses together used theirs (503).
    Total { retry_after_secs: u64 },
}

/// A bucket's fill at a time.
#[derive(Clone, Copy, Debug)]
struct Fill {
    tokens: f64,
    at: Instant,
}

impl Fill {
    fn full(bucket: Bucket, now: Instant) -> Fill {
        Fill {
            tokens: f64::from(bucket.burst),
            at: now,
        }
    }

    /// The fill at `now`, refilled since it was last seen.
    fn refilled(self, bucket: Bucket, now: Instant) -> Fill {
        let every = bucket.every.as_secs_f64();
        let gained = if every > 0.0 {
            now.saturating_duration_since(self.at).as_secs_f64() / every
        } else {
            f64::INFINITY
        };
        Fill {
            tokens: (self.tokens + gained).min(f64::from(bucket.burst)),
            at: now,
        }
    }

    /// Whole seconds until one start is available (at least 1).
    fn wait_secs(self, bucket: Bucket) -> u64 {
        let missing = (1.0 - self.tokens).max(0.0);
        let secs = (missing * bucket.every.as_secs_f64()).ceil();
        // A float of seconds; the cast saturates, and `every` is a flag-sized duration.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let secs = secs as u64;
        secs.max(1)
    }
}

#[derive(Debug)]
struct Buckets {
    total: Fill,
    clients: HashMap<ClientKey, Fill>,
}

/// The buckets, shared by every request.
#[derive(Debug)]
pub struct SignInRate {
    limits: SignInLimits,
    buckets: Mutex<Buckets>,
}

impl SignInRate {
    /// Full buckets of the shapes in `limits`.
    #[must_use]
    pub fn new(limits: SignInLimits) -> SignInRate {
        SignInRate {
            limits,
            buckets: Mutex::new(Buckets {
                total: Fill::full(limits.total, Instant::now()),
                clients: HashMap::new(),
            }),
        }
    }

    /// Takes one start for a client at `addr` (`None`: unknown, counted as one client), or says
    /// why not.
    pub fn take(&self, addr: Option<IpAddr>) -> Result<(), Refused> {
        self.take_at(ClientKey::of(addr), Instant::now())
    }

    fn take_at(&self, key: ClientKey, now: Instant) -> Result<(), Refused> {
        let limits = self.limits;
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let client = match buckets.clients.get(&key) {
            Some(fill) => fill.refilled(limits.per_address, now),
            None => {
                if buckets.clients.len() >= MAX_CLIENTS {
                    let burst = f64::from(limits.per_address.burst);
                    buckets
                        .clients
                        .retain(|_, f| f.refilled(limits.per_address, now).tokens < burst);
                }
                if buckets.clients.len() >= MAX_CLIENTS {
                    return Err(Refused::Total {
                        retry_after_secs: limits.per_address.every.as_secs().max(1),
                    });
                }
                Fill::full(limits.per_address, now)
            }
        };
        if client.tokens < 1.0 {
            buckets.clients.insert(key, client);
            return Err(Refused::Address {
                retry_after_secs: client.wait_secs(limits.per_address),
            });
        }
        let total = buckets.total.refilled(limits.total, now);
        if total.tokens < 1.0 {
            buckets.total = total;
            buckets.clients.insert(key, client);
            return Err(Refused::Total {
                retry_after_secs: total.wait_secs(limits.total),
            });
        }
        buckets.total = Fill {
            tokens: total.tokens - 1.0,
            ..total
        };
        buckets.clients.insert(
            key,
            Fill {
                tokens: client.tokens - 1.0,
                ..client
            },
        );
        Ok(())
    }
}

impl Default for SignInRate {
    fn default() -> Self {
        SignInRate::new(SignInLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> ClientKey {
        ClientKey::of(Some(s.parse().expect("address")))
    }

    fn limits(per: u32, total: u32) -> SignInLimits {
        SignInLimits {
            per_address: Bucket {
                burst: per,
                every: Duration::from_secs(10),
            },
            total: Bucket {
                burst: total,
                every: Duration::from_secs(2),
            },
        }
    }

    #[test]
    fn an_address_gets_its_burst_then_waits_for_the_refill() {
        let rate = SignInRate::new(limits(2, 100));
        let t0 = Instant::now();
        let a = key("192.0.2.1");
        assert_eq!(rate.take_at(a, t0), Ok(()));
        assert_eq!(rate.take_at(a, t0), Ok(()));
        assert_eq!(
            rate.take_at(a, t0),
            Err(Refused::Address {
                retry_after_secs: 10
            })
        );
        assert_eq!(
            rate.take_at(a, t0 + Duration::from_secs(4)),
            Err(Refused::Address {
                retry_after_secs: 6
            })
        );
        assert_eq!(
            rate.take_at(key("192.0.2.2"), t0),
            Ok(()),
            "another address"
        );
        assert_eq!(rate.take_at(a, t0 + Duration::from_secs(10)), Ok(()));
    }

    #[test]
    fn ipv6_addresses_share_their_64_and_the_total_caps_everyone() {
        let rate = SignInRate::new(limits(1, 3));
        let t0 = Instant::now();
        assert_eq!(rate.take_at(key("2001:db8::1"), t0), Ok(()));
        assert!(matches!(
            rate.take_at(key("2001:db8::ffff:1"), t0),
            Err(Refused::Address { .. })
        ));
        assert_eq!(rate.take_at(key("2001:db8:0:1::1"), t0), Ok(()));
        assert_eq!(rate.take_at(key("192.0.2.1"), t0), Ok(()));
        assert_eq!(
            rate.take_at(key("192.0.2.2"), t0),
            Err(Refused::Total {
                retry_after_secs: 2
            })
        );
        // The refused start took nothing from that address: it starts once the total refills.
        assert_eq!(
            rate.take_at(key("192.0.2.2"), t0 + Duration::from_secs(2)),
            Ok(())
        );
    }

    #[test]
    fn memory_stays_bounded_however_many_addresses_start() {
        let rate = SignInRate::new(SignInLimits {
            per_address: Bucket {
                burst: 1,
                every: Duration::from_secs(60),
            },
            total: Bucket {
                burst: u32::MAX,
                every: Duration::from_millis(1),
            },
        });
        let t0 = Instant::now();
        for i in 0..MAX_CLIENTS as u32 {
            let addr = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            assert_eq!(rate.take_at(ClientKey::of(Some(addr.into())), t0), Ok(()));
        }
        assert!(matches!(
            rate.take_at(key("192.0.2.9"), t0),
            Err(Refused::Total { .. })
        ));
        // A minute on, the early addresses' buckets are full again and are forgotten.
        assert_eq!(
            rate.take_at(key("192.0.2.9"), t0 + Duration::from_secs(60)),
            Ok(())
        );
        let remembered = rate.buckets.lock().expect("lock").clients.len();
        assert_eq!(remembered, 1);
    }
}
