//! The dashboard: a web page served by every host's HTTP API (`GET /` redirects to
//! `GET /ui/`), showing the fleet, runs live, one run's event log, a root run's call tree with
//! costs, approvals waiting (with approve and deny for an operator) and refusals by reason.
//!
//! The page is plain HTML, CSS and JavaScript compiled into the binary ([`ASSETS`]): no build
//! step, nothing fetched from elsewhere at run time. It reads the host only through the same
//! public JSON routes as any client, with the bearer token its user types in (kept in the
//! tab's `sessionStorage`); it has no privileged path, so what it shows is exactly what
//! [`crate::access`] lets that token see. The few reads the run API lacked are in [`data`].
//!
//! The asset answers carry strict headers: a Content-Security-Policy that allows only the
//! page's own origin (no inline script or style, no frames), `nosniff`, no referrer. The
//! assets themselves hold no data, so they are served to anyone who passes the front door
//! (`crate::listener`'s `Host` and `Origin` checks).
//!
//! This module must not read stores or decide who may see what.

pub(crate) mod calls;
pub(crate) mod data;

use axum::extract::Path;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

pub(crate) use data::FleetSight;

/// Only the page's own origin, for everything; no inline code, no frames, no forms elsewhere.
pub(crate) const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The page's files: name under `/ui/`, content type, bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("dashboard/assets/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("dashboard/assets/app.js"),
    ),
    (
        "sse.js",
        "text/javascript; charset=utf-8",
        include_bytes!("dashboard/assets/sse.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("dashboard/assets/favicon.svg"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("dashboard/assets/style.css"),
    ),
];

/// The asset named `name`, with its content type.
fn asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, bytes)| (*kind, *bytes))
}

/// The headers every dashboard answer carries.
fn with_page_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // The binary is the version: a page from an older binary must not linger in a cache.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /`: to the page.
#[utoipa::path(
    get, path = "/", tag = "dashboard",
    summary = "To the dashboard",
    responses((status = 303, description = "see `/ui/`")),
)]
pub(crate) async fn to_page() -> Response {
    with_page_headers((StatusCode::SEE_OTHER, [(LOCATION, "/ui/")]).into_response())
}

/// `GET /ui`: to the page.
#[utoipa::path(
    get, path = "/ui", tag = "dashboard",
    summary = "To the dashboard",
    responses((status = 303, description = "see `/ui/`")),
)]
pub(crate) async fn ui_to_page() -> Response {
    to_page().await
}

/// `GET /ui/`: the page.
#[utoipa::path(
    get, path = "/ui/", tag = "dashboard",
    summary = "The dashboard page",
    responses((status = 200, description = "the page", content_type = "text/html", body = String)),
)]
pub(crate) async fn page() -> Response {
    serve("index.html")
}

/// `GET /ui/{file}`: one of the page's files; anything else is 404.
#[utoipa::path(
    get, path = "/ui/{file}", tag = "dashboard",
    summary = "One of the dashboard's files (script, style, icon)",
    params(("file" = String, Path, description = "a file name the page refers to")),
    responses(
        (status = 200, description = "the file, with its content type", body = String),
        (status = 404, description = "no such file"),
    ),
)]
pub(crate) async fn file(Path(name): Path<String>) -> Response {
    serve(&name)
}

fn serve(name: &str) -> Response {
    match asset(name) {
        Some((kind, bytes)) => with_page_headers(([(CONTENT_TYPE, kind)], bytes).into_response()),
        None => with_page_headers(
            (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({
                    "error": {"code": "not_found", "message": "no such dashboard file"}
                })),
            )
                .into_response(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_found_by_name_and_nothing_else_is() {
        for (name, kind, bytes) in ASSETS {
            assert_eq!(asset(name), Some((*kind, *bytes)));
            assert!(!bytes.is_empty(), "{name}");
        }
        for missing in ["", "../Cargo.toml", "index.htm", "app.js/", "APP.JS"] {
            assert_eq!(asset(missing), None, "{missing}");
        }
    }

    #[test]
    fn the_page_loads_nothing_inline_and_nothing_from_elsewhere() {
        let html = std::str::from_utf8(asset("index.html").map(|a| a.1).unwrap_or_default())
            .unwrap_or_default();
        assert!(
            html.contains(r#"<script type="module" src="app.js">"#),
            "{html}"
        );
        // A CSP of 'self' would block inline code anyway; the page must not rely on any.
        for inline in ["<script>", "onclick=", "onload=", "style=\"", "javascript:"] {
            assert!(!html.contains(inline), "inline code in the page: {inline}");
        }
        for (name, _, bytes) in ASSETS {
            // An SVG names its XML namespace with a URL; that is not a fetch.
            let text = String::from_utf8_lossy(bytes).replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("http://"), "{name} names a remote origin");
            assert!(!text.contains("https://"), "{name} names a remote origin");
        }
    }

    #[tokio::test]
    async fn answers_carry_the_strict_headers() {
        for response in [to_page().await, page().await, serve("nope.js")] {
            let headers = response.headers();
            assert_eq!(
                headers.get(CONTENT_SECURITY_POLICY).unwrap(),
                CONTENT_SECURITY_POLICY_VALUE
            );
            assert_eq!(headers.get(X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff");
        }
        assert_eq!(to_page().await.headers().get(LOCATION).unwrap(), "/ui/");
        assert_eq!(serve("nope.js").status(), StatusCode::NOT_FOUND);
    }
}
