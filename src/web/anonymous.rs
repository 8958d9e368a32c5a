//! The in-flight slots of requests that carry no verified token or session (SECURITY.md item
//! 18). Anyone can send such a request (the sign-in form, static files, a forged or revoked
//! token), so they get a small pool of their own, in total and per client address, apart from
//! the slots token holders use: however many anonymous clients stall their bodies, a token
//! holder's request still finds a slot.
//!
//! A client address is the connection's peer ([`ClientAddr`], set by the accept loop); IPv6
//! clients are counted per /64, since one host commonly holds a whole /64. Behind a reverse
//! proxy every client shares the proxy's address, so the per-address share is the proxy's.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::AppError;

/// The peer address of the connection a request came on, inserted by the accept loop
/// ([`super::server::serve`]). Absent for requests built in-process (tests), which then count
/// as one unknown client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

/// What anonymous requests are counted by: an IPv4 address, an IPv6 /64, or the unknown client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    V4([u8; 4]),
    V6Prefix([u8; 8]),
    Unknown,
}

impl ClientKey {
    /// The key of a peer address (`None`: no address known).
    pub(crate) fn of(addr: Option<IpAddr>) -> ClientKey {
        match addr {
            None => ClientKey::Unknown,
            Some(IpAddr::V4(v4)) => ClientKey::V4(v4.octets()),
            Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4.octets()),
                None => ClientKey::V6Prefix(prefix64(&v6)),
            },
        }
    }
}

fn prefix64(v6: &Ipv6Addr) -> [u8; 8] {
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&v6.octets()[..8]);
    prefix
}

/// The anonymous pool: a total cap and a cap per client.
#[derive(Debug)]
pub struct AnonymousPool {
    total: Option<Arc<Semaphore>>,
    per_client: usize,
    /// Requests in flight per client; an entry exists only while its count is above zero, so
    /// the map never holds more entries than the pool has slots.
    clients: Counts,
}

/// Requests in flight per client, shared by the pool and its slots.
type Counts = Arc<Mutex<HashMap<ClientKey, usize>>>;

/// One anonymous request's slot: given back (both the total and the client's count) on drop.
#[derive(Debug)]
pub struct AnonymousSlot {
    _total: Option<OwnedSemaphorePermit>,
    client: Option<(ClientKey, Counts)>,
}

impl Drop for AnonymousSlot {
    fn drop(&mut self) {
        let Some((key, clients)) = self.client.take() else {
            return;
        };
        let mut clients = clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = clients.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                clients.remove(&key);
            }
        }
    }
}

impl AnonymousPool {
    /// A pool of `total` slots (no cap when 0) of which one client may hold `per_client` (no
    /// per-client cap when 0).
    pub fn new(total: usize, per_client: usize) -> AnonymousPool {
        AnonymousPool {
            total: (total > 0).then(|| Arc::new(Semaphore::new(total))),
            per_client,
            clients: Arc::default(),
        }
    }

    /// Takes a slot for a request from `client`: 429 `client_busy` when that client already
    /// holds its share, 503 when the pool is full.
    pub(crate) fn admit(&self, client: ClientKey) -> Result<AnonymousSlot, AppError> {
        let counted = if self.per_client == 0 {
            None
        } else {
            let mut clients = self
                .clients
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = clients.entry(client).or_insert(0);
            if *count >= self.per_client {
                return Err(AppError::ClientBusy(self.per_client));
            }
            *count += 1;
            Some((client, self.clients.clone()))
        };
        // From here the slot's drop gives the client's count back, also when the total is full.
        let mut slot = AnonymousSlot {
            _total: None,
            client: counted,
        };
        if let Some(total) = &self.total {
            slot._total = Some(
                total
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| AppError::Overloaded)?,
            );
        }
        Ok(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> ClientKey {
        ClientKey::of(Some(s.parse().expect("address")))
    }

    #[test]
    fn a_client_holds_at_most_its_share_and_others_still_get_in() {
        let pool = AnonymousPool::new(10, 2);
        let a1 = pool.admit(v4("127.0.0.2")).expect("first");
        let _a2 = pool.admit(v4("127.0.0.2")).expect("second");
        assert!(matches!(
            pool.admit(v4("127.0.0.2")),
            Err(AppError::ClientBusy(2))
        ));
        let _b = pool.admit(v4("127.0.0.3")).expect("another client");
        drop(a1);
        let _a3 = pool.admit(v4("127.0.0.2")).expect("a slot came back");
    }

    #[test]
    fn the_total_caps_all_clients_together_and_counts_come_back_when_refused() {
        let pool = AnonymousPool::new(2, 2);
        let _a = pool.admit(v4("10.0.0.1")).expect("a");
        let _b = pool.admit(v4("10.0.0.2")).expect("b");
        for _ in 0..5 {
            assert!(matches!(
                pool.admit(v4("10.0.0.3")),
                Err(AppError::Overloaded)
            ));
        }
        // Refusals left no count behind: the map holds only the two clients in flight.
        let clients = pool.clients.lock().expect("lock");
        assert_eq!(clients.len(), 2);
    }

    #[test]
    fn ipv6_clients_count_per_64_and_mapped_ipv4_counts_as_ipv4() {
        assert_eq!(
            ClientKey::of(Some("2001:db8:1:2::1".parse().expect("v6"))),
            ClientKey::of(Some("2001:db8:1:2:ffff::9".parse().expect("v6")))
        );
        assert_ne!(
            ClientKey::of(Some("2001:db8:1:2::1".parse().expect("v6"))),
            ClientKey::of(Some("2001:db8:1:3::1".parse().expect("v6")))
        );
        assert_eq!(
            ClientKey::of(Some("::ffff:192.0.2.7".parse().expect("mapped"))),
            v4("192.0.2.7")
        );
        assert_eq!(ClientKey::of(None), ClientKey::Unknown);
    }

    #[test]
    fn zero_means_no_cap() {
        let pool = AnonymousPool::new(0, 0);
        let held: Vec<_> = (0..500)
            .map(|_| pool.admit(ClientKey::Unknown).expect("no cap"))
            .collect();
        assert_eq!(held.len(), 500);
    }
}
