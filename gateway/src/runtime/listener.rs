//! The public listener's sockets and accept loop, in place of pingora's listening service:
//! each accepted connection becomes a pingora `Stream` (its peer address in the socket digest,
//! `TCP_NODELAY`) handed to the listener's application in a task of its own that holds only
//! that application's future. pingora's listening service spawns a task per connection sized
//! for its own TLS handshake (about 8 KiB, whatever the endpoint), which an open event stream
//! would hold for its whole life; the gateway does its own handshake (`tls/accept.rs`).
//! The sockets are bound before the server starts, so a port that cannot be had fails `serve`
//! with one line.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use pingora::{
    apps::ServerApp,
    protocols::{GetSocketDigest as _, SocketDigest, Stream, l4::socket::SocketAddr as PeerAddr},
    server::{ListenFds, ShutdownWatch},
    services::Service,
};

use super::ServeError;

/// Connections the kernel queues for `accept()` (pingora's own backlog).
const BACKLOG: i32 = 65_535;

/// How long the loop pauses after `accept()` failed for want of descriptors or memory (the
/// queued connections wait in the backlog rather than the loop spinning on the error).
const EXHAUSTED_PAUSE: Duration = Duration::from_secs(1);

/// One listening socket and the application its connections go to, run by pingora as a
/// service (per-core: one thread each, `SO_REUSEPORT` sockets on the same address).
pub(crate) struct Listener<A> {
    name: String,
    addr: SocketAddr,
    socket: Option<std::net::TcpListener>,
    app: Option<A>,
    threads: Option<usize>,
}

impl<A> Listener<A> {
    /// Binds `addr` now (`reuse_port` for one of several per-core sockets on it); `threads`:
    /// the service's own runtime size, `None` for pingora's global setting.
    pub(crate) fn bind(
        name: String,
        addr: SocketAddr,
        reuse_port: bool,
        threads: Option<usize>,
        app: A,
    ) -> Result<Self, ServeError> {
        let socket = bind(addr, reuse_port).map_err(|e| ServeError::Port(addr, e))?;
        Ok(Self {
            name,
            addr,
            socket: Some(socket),
            app: Some(app),
            threads,
        })
    }
}

/// A non-blocking listening TCP socket on `addr` with `SO_REUSEADDR` (and `SO_REUSEPORT`).
fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Whether an `accept()` error means the process is out of descriptors or memory (the loop
/// pauses) rather than one connection's failure (the loop goes on).
fn exhausted(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EMFILE | nix::libc::ENFILE | nix::libc::ENOBUFS | nix::libc::ENOMEM)
    )
}

/// Whether an accept error at `now` is logged, given when one last was: at most once a second.
fn log_accept_error(now: Instant, last: Option<Instant>) -> bool {
    last.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
}

/// The accepted `tcp` as pingora's stream: the peer address in its socket digest, no L4
/// buffers (the HTTP/1 reader and `proxy/batched.rs` size the reads and writes), no delay.
fn stream(tcp: tokio::net::TcpStream, peer: SocketAddr) -> Stream {
    use std::os::fd::AsRawFd as _;
    let fd = tcp.as_raw_fd();
    let mut stream = pingora::protocols::l4::stream::Stream::from(tcp);
    let digest = SocketDigest::from_raw_fd(fd);
    let _ = digest.peer_addr.set(Some(PeerAddr::Inet(peer)));
    stream.set_socket_digest(digest);
    if let Err(e) = stream.set_nodelay() {
        tracing::debug!(error = %e, "TCP_NODELAY not set on an accepted connection");
    }
    Box::new(stream)
}

/// One connection's task: the application's requests on it until it is done.
async fn serve<A: ServerApp>(app: Arc<A>, stream: Stream, shutdown: ShutdownWatch) {
    let mut next = app.process_new(stream, &shutdown).await;
    while let Some(stream) = next {
        next = app.process_new(stream, &shutdown).await;
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> Service for Listener<A> {
    async fn start_service(
        &mut self,
        _fds: Option<ListenFds>,
        mut shutdown: ShutdownWatch,
        _listeners_per_fd: usize,
    ) {
        let (Some(socket), Some(app)) = (self.socket.take(), self.app.take()) else {
            return;
        };
        let listener = match tokio::net::TcpListener::from_std(socket) {
            Ok(listener) => listener,
            Err(e) => {
                tracing::error!(listen = %self.addr, error = %e, "listener unusable");
                return;
            }
        };
        let app = Arc::new(app);
        let mut logged: Option<Instant> = None;
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                    continue;
                }
            };
            match accepted {
                Ok((tcp, peer)) => {
                    let (app, shutdown) = (app.clone(), shutdown.clone());
                    tokio::spawn(serve(app, stream(tcp, peer), shutdown));
                }
                Err(e) => {
                    let now = Instant::now();
                    if log_accept_error(now, logged) {
                        logged = Some(now);
                        tracing::warn!(listen = %self.addr, error = %e, "accept() failed");
                    }
                    if exhausted(&e) {
                        tokio::time::sleep(EXHAUSTED_PAUSE).await;
                    }
                }
            }
        }
        tracing::info!(listen = %self.addr, "stopped accepting");
        drop(listener);
        app.cleanup().await;
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    fn listen_addresses(&self) -> Option<Vec<String>> {
        Some(vec![self.addr.to_string()])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn accept_errors_are_logged_at_most_once_a_second() {
        let t0 = Instant::now();
        assert!(log_accept_error(t0, None));
        assert!(!log_accept_error(t0 + Duration::from_millis(999), Some(t0)));
        assert!(log_accept_error(t0 + Duration::from_secs(1), Some(t0)));
    }

    #[test]
    fn only_running_out_of_descriptors_or_memory_pauses_the_loop() {
        let os = std::io::Error::from_raw_os_error;
        assert!(exhausted(&os(nix::libc::EMFILE)));
        assert!(exhausted(&os(nix::libc::ENFILE)));
        assert!(!exhausted(&os(nix::libc::ECONNABORTED)));
    }

    #[test]
    fn per_core_sockets_share_one_address() {
        let first = bind("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let addr = first.local_addr().unwrap();
        let second = bind(addr, true).unwrap();
        assert_eq!(second.local_addr().unwrap(), addr);
        // Without SO_REUSEPORT the address is taken.
        assert!(bind(addr, false).is_err());
    }
}
