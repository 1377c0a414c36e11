//! The web page: one HTML document with its script and styles inlined (assets in
//! the crate, no build step, no CDN).

use axum::extract::State;
use axum::response::Html;

use crate::AppState;

const HTML: &str = include_str!("assets/index.html");
const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");

pub(crate) async fn index(State(s): State<AppState>) -> Html<String> {
    Html(HTML.replace("/*CSS*/", CSS).replace("/*JS*/", JS).replace(
        "__READ_ONLY__",
        if s.opts.read_only { "true" } else { "false" },
    ))
}
