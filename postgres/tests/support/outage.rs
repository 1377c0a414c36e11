//! Outages of one test's database, never of the shared server: every session on
//! it killed (`pg_terminate_backend`), new sessions refused for a stretch
//! (`ALLOW_CONNECTIONS false`), or only one role's sessions cut off (the role
//! made unable to log in), each run from the server's `postgres` database.

/// The database name of a URL made by [`super::database`].
pub fn db_name(url: &str) -> String {
    url.rsplit('/').next().unwrap_or_default().to_owned()
}

/// Kills every session on the database at `url` (but the killer's); returns how
/// many were killed.
pub async fn kill_sessions(url: &str) -> i64 {
    kill_where(url, None).await
}

/// Kills the sessions of the role `role` on the database at `url`.
pub async fn kill_sessions_of(url: &str, role: &str) -> i64 {
    kill_where(url, Some(role)).await
}

async fn kill_where(url: &str, role: Option<&str>) -> i64 {
    let base = super::cluster().base.clone();
    let (client, conn) =
        tokio_postgres::connect(&format!("{base}/postgres"), tokio_postgres::NoTls)
            .await
            .expect("connect to the server");
    let task = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid() \
             AND ($2::text IS NULL OR usename = $2)",
            &[&db_name(url), &role],
        )
        .await
        .expect("terminate sessions");
    drop(client);
    let _ = task.await;
    row.get(0)
}

/// Refuses new sessions on the database at `url` and kills the ones open: the
/// database is gone for its hosts until [`allow`].
pub async fn refuse(url: &str) {
    super::admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS false",
        db_name(url)
    ))
    .await;
    kill_sessions(url).await;
}

/// Accepts sessions on the database at `url` again.
pub async fn allow(url: &str) {
    super::admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS true",
        db_name(url)
    ))
    .await;
}

/// A superuser role of its own for the database at `url` (named after it), and
/// the URL that logs in as it: a host that can be cut off alone ([`cut_off`]).
pub async fn own_role(url: &str) -> (String, String) {
    let role = format!("{}_cut", db_name(url));
    super::admin(&format!("CREATE ROLE {role} SUPERUSER LOGIN")).await;
    let as_role = url.replacen("://postgres@", &format!("://{role}@"), 1);
    assert_ne!(
        as_role, url,
        "the test server's URL names the user postgres"
    );
    (role, as_role)
}

/// Cuts the role off: no new session, the open ones killed.
pub async fn cut_off(url: &str, role: &str) {
    super::admin(&format!("ALTER ROLE {role} NOLOGIN")).await;
    kill_sessions_of(url, role).await;
}

/// Lets the role log in again.
pub async fn reconnect(role: &str) {
    super::admin(&format!("ALTER ROLE {role} LOGIN")).await;
}
