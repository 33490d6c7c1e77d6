//! The stage's model, reporting streamed characters to its progress line.

use crate::llm::ChatModel;
use std::sync::Arc;

/// A model wrapper that reports streamed characters to the stage's progress
/// line; everything else is the inner model's.
pub(super) struct ProgressModel {
    pub(super) inner: Arc<dyn ChatModel>,
    pub(super) progress: crate::ui::ProgressHandle,
    pub(super) stage: String,
}

impl crate::llm::ModelWrapper for ProgressModel {
    fn inner(&self) -> &dyn ChatModel {
        self.inner.as_ref()
    }

    fn send<'a>(
        &'a self,
        req: &'a crate::llm::ChatRequest,
        _on_delta: Option<&'a crate::llm::DeltaFn<'a>>,
    ) -> crate::llm::BoxFuture<'a, Result<crate::llm::ChatResponse, crate::llm::LlmError>> {
        Box::pin(async move {
            let on_delta = |chars: usize| self.progress.streaming(&self.stage, chars);
            self.inner.complete_with_progress(req, &on_delta).await
        })
    }
}
