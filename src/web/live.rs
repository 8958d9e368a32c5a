//! Requests in flight by whose credentials they carry (SECURITY.md item 24), so that revoking a
//! token or disabling a person ends what they have under way at once, not when a stalled
//! upload finally finishes: the admission middleware registers each verified request here and
//! races its handler against [`Ended::wait`]; the handlers that revoke or disable answer with
//! [`EndRequests`], and the middleware ends the other requests that carry what was revoked.
//!
//! This is per process. Another replica's revocation reaches this one's requests through the
//! database instead: an upload locks its token (or person) row when it stores, so one revoked
//! anywhere stores nothing (`app::upload`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// Whose credentials a request carries: the tokens it presented (a bearer token, the token a
/// session signed in with) and the person they act for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holders {
    pub tokens: Vec<i64>,
    pub persons: Vec<i64>,
}

/// Set once a request's credentials are revoked; the request ends when it sees it.
#[derive(Debug, Default)]
pub struct Ended {
    flag: AtomicBool,
    notify: Notify,
}

impl Ended {
    /// Whether the request's credentials have been revoked.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves once the request's credentials are revoked.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }

    fn set(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

#[derive(Debug)]
struct Entry {
    holders: Holders,
    ended: Arc<Ended>,
}

/// The verified requests this process is working on.
#[derive(Debug, Default)]
pub struct LiveRequests {
    next: AtomicU64,
    entries: Mutex<HashMap<u64, Entry>>,
}

impl LiveRequests {
    /// Registers a request carrying `holders`; it stays registered until the returned
    /// [`Registration`] is dropped (with the request's in-flight slots).
    pub fn register(self: &Arc<Self>, holders: Holders) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ended = Arc::new(Ended::default());
        self.lock().insert(
            id,
            Entry {
                holders,
                ended: ended.clone(),
            },
        );
        Registration {
            id,
            ended,
            live: self.clone(),
        }
    }

    /// Ends every request that carries one of `revoked`'s tokens or acts for one of its
    /// persons, except request `except` (the one revoking: its own answer still goes out);
    /// returns how many.
    pub fn end(&self, revoked: &Holders, except: Option<u64>) -> usize {
        let entries = self.lock();
        let mut ended = 0;
        for (id, entry) in entries.iter() {
            let carries = entry
                .holders
                .tokens
                .iter()
                .any(|t| revoked.tokens.contains(t))
                || entry
                    .holders
                    .persons
                    .iter()
                    .any(|p| revoked.persons.contains(p));
            if carries && Some(*id) != except {
                entry.ended.set();
                ended += 1;
            }
        }
        ended
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A request's place in [`LiveRequests`]; dropping it takes the request off.
#[derive(Debug)]
pub struct Registration {
    id: u64,
    ended: Arc<Ended>,
    live: Arc<LiveRequests>,
}

impl Registration {
    /// The request's revocation signal.
    #[must_use]
    pub fn ended(&self) -> Arc<Ended> {
        self.ended.clone()
    }

    /// The request's number among those in flight.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// A handler's word that it revoked credentials: the admission middleware then ends the other
/// requests in flight that carry them (it rides on the response, so handlers stay thin).
#[derive(Clone, Debug, Default)]
pub struct EndRequests(pub Holders);

impl EndRequests {
    /// The requests of token `id`.
    #[must_use]
    pub fn of_token(id: i64) -> EndRequests {
        EndRequests(Holders {
            tokens: vec![id],
            persons: Vec::new(),
        })
    }

    /// The requests of person `id`: their sessions and every token they own.
    #[must_use]
    pub fn of_person(id: i64) -> EndRequests {
        EndRequests(Holders {
            tokens: Vec::new(),
            persons: vec![id],
        })
    }
}

impl axum::response::IntoResponseParts for EndRequests {
    type Error = std::convert::Infallible;

    fn into_response_parts(
        self,
        mut res: axum::response::ResponseParts,
    ) -> Result<axum::response::ResponseParts, Self::Error> {
        res.extensions_mut().insert(self);
        Ok(res)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.live.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holders(tokens: &[i64], persons: &[i64]) -> Holders {
        Holders {
            tokens: tokens.to_vec(),
            persons: persons.to_vec(),
        }
    }

    #[tokio::test]
    async fn revoking_ends_exactly_the_requests_that_carry_it() {
        let live = Arc::new(LiveRequests::default());
        let a = live.register(holders(&[1], &[7]));
        let b = live.register(holders(&[2], &[7]));
        let c = live.register(holders(&[3], &[]));
        assert_eq!(live.end(&holders(&[1], &[]), None), 1);
        assert!(a.ended().is_set() && !b.ended().is_set() && !c.ended().is_set());
        a.ended().wait().await; // Already ended: resolves at once.
        // The revoking request itself is spared.
        assert_eq!(live.end(&holders(&[], &[7]), Some(b.id())), 1);
        assert!(!b.ended().is_set());
        assert_eq!(live.end(&holders(&[], &[7]), None), 2);
        assert!(b.ended().is_set() && !c.ended().is_set());
        // A finished request is gone from the registry.
        drop(c);
        assert_eq!(live.end(&holders(&[3], &[]), None), 0);
    }

    #[tokio::test]
    async fn a_waiting_request_wakes_when_its_token_is_revoked() {
        let live = Arc::new(LiveRequests::default());
        let reg = live.register(holders(&[5], &[]));
        let ended = reg.ended();
        let waiter = tokio::spawn(async move { ended.wait().await });
        tokio::task::yield_now().await;
        assert_eq!(live.end(&holders(&[5], &[]), None), 1);
        waiter.await.expect("the waiter ends");
    }
}
