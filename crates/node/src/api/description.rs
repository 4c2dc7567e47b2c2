//! The OpenAPI 3.1 description of the node's HTTP API, served at `GET /openapi.json`:
//! every route of the API and the status page (collected from the handlers as the router
//! is built) and the DON member endpoint, which a member serves on `[don].listen`.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::{ServerBuilder, ServerVariableBuilder};

/// The description's fixed parts: its title, the tags and the bearer scheme.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "cresolver node HTTP API",
        description = "The resolver node's HTTP API (`[api].listen`): health, metrics, the round store read-only, the bearer-guarded manual trigger and the operator's status page; and the endpoint a DON member serves to the other members (`[don].listen`). Every error of the API is JSON `{\"error\": \"...\"}`, unknown routes (404) and methods (405) included."
    ),
    tags(
        (name = "health", description = "Health, readiness, metrics and this description"),
        (name = "rounds", description = "The round store, read-only, and the manual trigger"),
        (name = "status page", description = "The operator's status page and the views it reads (no token: read-only)"),
        (name = "don", description = "The DON member endpoint, served on `[don].listen`")
    ),
    components(schemas(crate::http::ErrorBody)),
    modifiers(&Bearer)
)]
pub struct ApiDescription;

/// Adds the bearer scheme `POST /resolve` asks for.
struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The token in the environment variable that `api.token_env` names (`CRESOLVER_API_TOKEN` by default)",
                    ))
                    .build(),
            ),
        );
    }
}

/// The whole description: the API's routes, the status page's, and the DON member
/// endpoint (with its own server: a member's `[don].listen`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDescription::openapi();
    doc.merge(super::described().into_openapi());
    let mut don = cresolver_don::server::openapi();
    let listener = ServerBuilder::new()
        .url("http://{listen}")
        .description(Some(
            "A DON member's `[don].listen` (not the API's address)",
        ))
        .parameter(
            "listen",
            ServerVariableBuilder::new()
                .default_value("127.0.0.1:9500")
                .description(Some("The member's `[don].listen`")),
        )
        .build();
    for item in don.paths.paths.values_mut() {
        item.servers = Some(vec![listener.clone()]);
    }
    doc.merge(don);
    doc
}

/// This description, as JSON.
#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = OK, description = "The OpenAPI 3.1 description of this API", body = Object)))]
pub(super) async fn openapi_json() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let json = DOC.get_or_init(|| openapi().to_json().unwrap_or_else(|_| "{}".into()));
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json.as_str(),
    )
        .into_response()
}
