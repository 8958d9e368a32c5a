//! A TCP proxy in front of the test's SeaweedFS that can fail on command, to put a real store
//! into the states the faults tests need: down (connections refused and live ones cut), down
//! half way through an upload (cut once a number of bytes has gone through), or slow (accepted
//! and never answered).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// What the proxy does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Forwards both ways.
    Pass,
    /// Closes new connections at once and has cut the live ones: the store is down.
    Refuse,
    /// Accepts and reads, never answers: the store hangs.
    Stall,
}

struct Shared {
    mode: Mutex<Mode>,
    live: Mutex<Vec<TcpStream>>,
    /// Bytes that may still go upstream before the proxy cuts everything (negative: no limit).
    budget: AtomicI64,
}

impl Shared {
    fn cut_all(&self) {
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// The proxy; it runs until the test binary exits.
pub(crate) struct FaultProxy {
    pub port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:upstream`.
    pub(crate) fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            live: Mutex::new(Vec::new()),
            budget: AtomicI64::new(-1),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let mode = *s.mode.lock().unwrap();
                match mode {
                    Mode::Refuse => drop(client),
                    Mode::Stall => {
                        s.live.lock().unwrap().push(client.try_clone().unwrap());
                        std::thread::spawn(move || drain(client));
                    }
                    Mode::Pass => {
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                            continue;
                        };
                        {
                            let mut live = s.live.lock().unwrap();
                            live.push(client.try_clone().unwrap());
                            live.push(server.try_clone().unwrap());
                        }
                        let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        let up = s.clone();
                        std::thread::spawn(move || pump(client, server, Some(up)));
                        std::thread::spawn(move || pump(s2, c2, None));
                    }
                }
            }
        });
        FaultProxy { port, shared }
    }

    /// Switches mode; leaving `Pass` cuts every live connection.
    pub(crate) fn set(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
        if mode != Mode::Pass {
            self.shared.cut_all();
        } else {
            self.shared.budget.store(-1, Ordering::SeqCst);
        }
    }

    /// Passes `bytes` more bytes upstream, then goes down ([`Mode::Refuse`]) in the middle of
    /// whatever request is under way.
    pub(crate) fn cut_after(&self, bytes: i64) {
        self.shared.budget.store(bytes, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`; upstream copies spend the budget and cut everything when it runs out.
fn pump(mut from: TcpStream, mut to: TcpStream, upstream: Option<Arc<Shared>>) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut take = n;
        if let Some(s) = &upstream {
            let before = s.budget.load(Ordering::SeqCst);
            if before >= 0 {
                take = n.min(usize::try_from(before).unwrap_or(0));
                s.budget.fetch_sub(take as i64, Ordering::SeqCst);
                if take < n {
                    let _ = to.write_all(&buf[..take]);
                    *s.mode.lock().unwrap() = Mode::Refuse;
                    s.cut_all();
                    break;
                }
            }
        }
        if to.write_all(&buf[..take]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Reads and throws away until the peer goes.
fn drain(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}
