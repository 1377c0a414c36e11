//! What every connection of a store is opened with: bounds on how long a
//! connection to a server that has gone silent is kept ([`bound_silences`]), and,
//! for a cluster member, the fence on stalled transactions
//! ([`fence_stalled_transactions`]).

use std::time::Duration;

/// Given up on when the server has not answered the connect by then.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection waiting on the server is probed after this much silence...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// ... every this often ...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// ... and dropped after this many probes go unanswered.
const KEEPALIVE_RETRIES: u32 = 3;
/// Data sent and not acknowledged for this long drops the connection (Linux).
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Bounds what a connection waits on a server that is gone (its machine off, a
/// network cut that sends no reset) where the operating system's defaults would
/// wait two hours on an idle connection, and about fifteen minutes on unacknowledged data:
/// the connect, the silence while a statement's answer is awaited (TCP
/// keepalives), and data the server does not acknowledge (`TCP_USER_TIMEOUT`).
/// The connection then fails, the pool opens another, and the caller gets an
/// error (a run's write fails and the run is restarted from the log) instead of
/// waiting for ever. A cluster member sends unacknowledged data for at most a
/// lease time: past it, the write would be refused anyway.
///
/// None of these ends a slow statement on a live server: keepalives are answered
/// by the server's operating system, and the send timeout counts only data not
/// yet acknowledged. A value the URL sets (`connect_timeout`, `keepalives_idle`,
/// `keepalives_interval`, `keepalives_retries`, `tcp_user_timeout`) is kept;
/// `keepalives=0` turns the probes off.
pub(crate) fn bound_silences(config: &mut tokio_postgres::Config, lease_ttl: Option<Duration>) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // tokio-postgres's default idle time: the URL did not set one.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    if config.get_tcp_user_timeout().is_none() {
        let send = lease_ttl.map_or(SEND_TIMEOUT, |ttl| {
            ttl.clamp(Duration::from_secs(1), SEND_TIMEOUT)
        });
        config.tcp_user_timeout(send);
    }
}

/// A member's write transactions lock their partitions' lease rows: one left
/// open by a stalled process (frozen, or cut off while the server still sees
/// its session) would keep other hosts from taking those partitions over for as
/// long as the session lives. The server ends a session idle inside a
/// transaction for a lease time, which releases its locks; the member's own
/// lease has run out by then, and its next write fails.
pub(crate) fn fence_stalled_transactions(config: &mut tokio_postgres::Config, lease_ttl: Duration) {
    let timeout = format!(
        "-c idle_in_transaction_session_timeout={}",
        lease_ttl.as_millis().max(1)
    );
    let options = match config.get_options() {
        Some(given) if !given.is_empty() => format!("{given} {timeout}"),
        _ => timeout,
    };
    config.options(&options);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(url: &str, lease_ttl: Option<Duration>) -> tokio_postgres::Config {
        let mut config: tokio_postgres::Config = url.parse().expect("url");
        bound_silences(&mut config, lease_ttl);
        config
    }

    #[test]
    fn a_url_without_bounds_gets_them() {
        let c = bounded("postgres://reel@127.0.0.1/reel", None);
        assert_eq!(c.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
        assert!(c.get_keepalives());
        assert_eq!(c.get_keepalives_idle(), KEEPALIVE_IDLE);
        assert_eq!(c.get_keepalives_interval(), Some(KEEPALIVE_INTERVAL));
        assert_eq!(c.get_keepalives_retries(), Some(KEEPALIVE_RETRIES));
        assert_eq!(c.get_tcp_user_timeout(), Some(&SEND_TIMEOUT));
    }

    #[test]
    fn a_member_sends_for_at_most_a_lease_time() {
        let c = bounded(
            "postgres://reel@127.0.0.1/reel",
            Some(Duration::from_secs(5)),
        );
        assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_secs(5)));
        let c = bounded(
            "postgres://reel@127.0.0.1/reel",
            Some(Duration::from_millis(10)),
        );
        assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_secs(1)));
        let c = bounded(
            "postgres://reel@127.0.0.1/reel",
            Some(Duration::from_secs(600)),
        );
        assert_eq!(c.get_tcp_user_timeout(), Some(&SEND_TIMEOUT));
    }

    #[test]
    fn bounds_the_url_sets_are_kept() {
        let c = bounded(
            "host=127.0.0.1 user=reel connect_timeout=3 keepalives_idle=60 \
             keepalives_interval=7 keepalives_retries=9 tcp_user_timeout=4",
            Some(Duration::from_secs(5)),
        );
        assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(c.get_keepalives_idle(), Duration::from_secs(60));
        assert_eq!(c.get_keepalives_interval(), Some(Duration::from_secs(7)));
        assert_eq!(c.get_keepalives_retries(), Some(9));
        assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_secs(4)));
        let c = bounded("host=127.0.0.1 user=reel keepalives=0", None);
        assert!(!c.get_keepalives());
    }
}
