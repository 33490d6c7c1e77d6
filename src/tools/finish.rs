//! `finish`: ends the stage with the agent's summary and, for reviewers, a verdict.

use super::args::Args;
use super::outcome::{FinishCall, ToolOutcome};
use crate::ids::Verdict;
use crate::text::one_line;

pub(crate) fn run(args: &Args) -> Result<ToolOutcome, String> {
    let summary = args.string("summary", "what you did and found")?;
    if summary.trim().is_empty() {
        return Err("argument `summary` is empty; describe what you did and found".to_owned());
    }
    let verdict = match args.opt_string("verdict", "\"approve\" or \"request_changes\"")? {
        None => None,
        Some(v) => Some(Verdict::parse(&v).ok_or_else(|| {
            format!(
                "argument `verdict` must be \"approve\" or \"request_changes\", got \"{}\"",
                one_line(&v, 40)
            )
        })?),
    };
    let choice = args.opt_u64("choice")?;
    let label = match verdict {
        Some(v) => format!("finish ({v}): {}", summary.trim()),
        None => format!("finish: {}", summary.trim()),
    };
    let mut out = ToolOutcome::ok("stage finished".to_owned(), label);
    out.finish = Some(FinishCall {
        summary,
        verdict,
        choice,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::ids::Verdict;
    use crate::tools::test_support::{call, ctx};
    use serde_json::json;

    #[tokio::test]
    async fn finish_with_and_without_verdict() {
        let (_d, ctx) = ctx();
        let out = call(
            &ctx,
            "finish",
            json!({"summary": "done", "verdict": "request_changes"}),
        )
        .await;
        assert!(!out.is_error);
        let f = out.finish.unwrap();
        assert_eq!(f.summary, "done");
        assert_eq!(f.verdict, Some(Verdict::RequestChanges));
        assert_eq!(out.summary, "finish (request_changes): done");

        let out = call(&ctx, "finish", json!({"summary": "ok", "verdict": null})).await;
        assert_eq!(out.finish.unwrap().verdict, None);
    }

    #[tokio::test]
    async fn bad_verdict_is_an_error() {
        let (_d, ctx) = ctx();
        let out = call(&ctx, "finish", json!({"summary": "x", "verdict": "lgtm"})).await;
        assert!(out.is_error);
        assert!(out.finish.is_none());
        assert_eq!(
            out.content,
            "error: finish: argument `verdict` must be \"approve\" or \"request_changes\", got \"lgtm\""
        );
        let out = call(&ctx, "finish", json!({})).await;
        assert!(
            out.content.contains("argument `summary` is required"),
            "{}",
            out.content
        );
    }
}
