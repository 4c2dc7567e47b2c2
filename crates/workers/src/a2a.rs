//! The A2A worker protocol of `cre-agent-protocol.md`: `POST {endpoint}/a2a/resolve`
//! and `POST {endpoint}/a2a/challenge` with JSON bodies.

use super::client::{StageClient, join_endpoint};
use super::protocol::{
    ChallengeOutcome, ChallengeRequest, ResolveAnswer, ResolveRequest, WorkerFailure,
    WorkerProtocol, parse_challenge_responses, parse_resolve_answer,
};
use futures::future::BoxFuture;
use url::Url;

/// `{"challenges": [...]}`, serialized without an intermediate JSON value.
#[derive(serde::Serialize)]
struct ChallengeBody<'a> {
    challenges: &'a [String],
}

/// The CRE agent protocol (the default for every worker).
#[derive(Debug, Clone, Copy, Default)]
pub struct A2aProtocol;

impl WorkerProtocol for A2aProtocol {
    fn name(&self) -> &'static str {
        "a2a"
    }

    fn resolve<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: &'a ResolveRequest,
    ) -> BoxFuture<'a, Result<ResolveAnswer, WorkerFailure>> {
        Box::pin(async move {
            let url = join_endpoint(endpoint, "a2a/resolve")?;
            let reply = client.post_json(url, request).await?;
            parse_resolve_answer(&reply.body)
        })
    }

    fn challenge<'a>(
        &'a self,
        client: &'a StageClient,
        endpoint: &'a Url,
        request: ChallengeRequest<'a>,
    ) -> BoxFuture<'a, ChallengeOutcome> {
        let challenges = request.challenges;
        Box::pin(async move {
            let fail = |failure| ChallengeOutcome {
                challenges: challenges.to_vec(),
                responses: vec![],
                failure: Some(failure),
            };
            let url = match join_endpoint(endpoint, "a2a/challenge") {
                Ok(u) => u,
                Err(e) => return fail(e),
            };
            match client.post_json(url, &ChallengeBody { challenges }).await {
                Ok(reply) => parse_challenge_responses(&reply.body, challenges),
                Err(e) => fail(e),
            }
        })
    }
}
