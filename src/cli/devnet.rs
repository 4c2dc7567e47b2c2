//! The development harness's commands: `cresolver agent` and `cresolver demo`.

use super::*;
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode, FailureMode};

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8700")]
    pub listen: String,
    /// Name shown in answers and /health.
    #[arg(long, default_value = "reference-agent")]
    pub name: String,
    /// How to decide: yes, no, or hash (from the question, like the reference mock).
    #[arg(long, value_enum, default_value_t = DeterminationMode::Hash)]
    pub determination: DeterminationMode,
    /// Fixed confidence in [0,1] (default: from the question hash).
    #[arg(long)]
    pub confidence: Option<f64>,
    /// Delay before every answer, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Misbehave on purpose.
    #[arg(long, value_enum)]
    pub failure: Option<FailureMode>,
}

/// Runs the reference worker until Ctrl-C.
pub async fn agent_cmd(a: AgentArgs) -> anyhow::Result<ExitCode> {
    if let Some(c) = a.confidence {
        anyhow::ensure!(
            c.is_finite() && (0.0..=1.0).contains(&c),
            "--confidence must be in [0, 1]"
        );
    }
    let behaviour = AgentBehaviour {
        name: a.name,
        determination: a.determination,
        confidence: a.confidence,
        latency: Duration::from_millis(a.latency_ms),
        failure: a.failure,
    };
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (port in use? pick another with --listen)",
                a.listen
            )
        })?;
    eprintln!(
        "reference agent listening on http://{}",
        listener.local_addr()?
    );
    cresolver_devnet::agent::serve(listener, behaviour, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// A whole resolution on a local anvil chain.
pub async fn demo_cmd(workers: usize, json: bool) -> anyhow::Result<ExitCode> {
    let summary = cresolver_devnet::demo::run(cresolver_devnet::demo::DemoOptions {
        workers,
        progress: !json,
        ..Default::default()
    })
    .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", cresolver_devnet::demo::render(&summary));
    }
    Ok(if summary.state.is_confirmed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
