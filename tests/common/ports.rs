//! Free TCP ports for the processes a test starts (nodes, PostgreSQL, devnets).

/// A port nothing listens on now (for a node's API), picked below Linux's ephemeral
/// range (32768–60999), so no outgoing connection of a test can take it between this
/// pick and the bind of the process it is meant for (a port from `bind(0)`
/// can be, and once was: "Address already in use"). A counter keeps the picks of the
/// concurrent tests of one binary apart; a binary run beside it (`rpc_outage`) counts
/// from another start (its process id), and every pick is checked free when made.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `n` consecutive ports nothing listens on now, picked as [`free_port`]
/// picks one (below the ephemeral range, from a counter shared by the whole binary).
pub fn free_ports(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = u32::from(n.max(1));
    let base = std::process::id() % SPAN;
    loop {
        let taken = NEXT.fetch_add(n, Ordering::Relaxed);
        assert!(taken < SPAN, "no free port left below the ephemeral range");
        let first = (base + taken) % SPAN;
        if first + n > SPAN {
            continue; // the block would wrap around the span
        }
        let free = (first..first + n)
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", (LOW + p) as u16)).is_ok());
        if free {
            return (LOW + first) as u16;
        }
    }
}
