//! The Responses wire format plugged into the HTTP client's seam
//! ([`WireFormat`]): the endpoint, Bearer auth as Chat Completions, the
//! body and reply of [`super`], and what a failure inside a reply means.

use super::{ResponsesAssembler, endpoint, parse_response, request_body};
use crate::llm::openai::{
    Attempt, ChatCompletions, Kind, OPENAI_KEY_VARS, OpenAiClient, StreamDecoder, Transient,
    WireFormat,
};
use crate::llm::stream::{Assembled, ChunkError};
use crate::llm::{ChatRequest, LlmError};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;
use std::time::Duration;

/// OpenAI Responses (`provider = "openai-responses"`).
pub(crate) struct Responses;

impl WireFormat for Responses {
    fn endpoint(&self, base_url: &str) -> String {
        endpoint(base_url)
    }

    fn auth_headers(&self, client: &OpenAiClient, headers: &mut HeaderMap) -> Result<(), LlmError> {
        ChatCompletions.auth_headers(client, headers)
    }

    fn request_body(
        &self,
        client: &OpenAiClient,
        req: &ChatRequest,
        stream: bool,
    ) -> Result<Vec<u8>, LlmError> {
        let settings = client.settings();
        Ok(request_body(
            &settings.model,
            &settings.sampling,
            req,
            stream,
        ))
    }

    fn parse_completion(&self, client: &OpenAiClient, bytes: &[u8]) -> Result<Assembled, Attempt> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Attempt::Fatal(client.bad("the body is empty".to_owned())));
        }
        parse_response(bytes, client.settings().max_reply_bytes).map_err(|e| match e {
            ChunkError::Malformed(what) => Attempt::Fatal(client.bad(format!(
                "{what}; the body starts with: {}",
                client.quote(bytes)
            ))),
            ChunkError::Server(err) => self.stream_error(client, &err),
            ChunkError::TooLarge(why) => Attempt::Fatal(client.bad(why)),
        })
    }

    fn stream_decoder(&self, limit: usize) -> Box<dyn StreamDecoder> {
        Box::new(ResponsesAssembler::with_limit(limit))
    }

    fn classify_status(
        &self,
        client: &OpenAiClient,
        status: StatusCode,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Attempt {
        client.classify_status(status, retry_after, bytes, OPENAI_KEY_VARS)
    }

    /// A `response.failed` error, an `error` event, or a failed plain
    /// response: a context-length error is that error; a rate limit is
    /// retried as one; an invalid request fails at once; anything else is
    /// retried as a server error.
    fn stream_error(&self, client: &OpenAiClient, err: &Value) -> Attempt {
        let code = err
            .get("code")
            .or_else(|| err.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("");
        match code {
            "rate_limit_exceeded" | "rate_limit_error" => Attempt::Transient(Transient::new(
                format!(
                    "the server reported a rate limit mid-response: {}",
                    client.quote(err.to_string().as_bytes())
                ),
                Kind::RateLimit,
            )),
            "invalid_prompt" | "invalid_request_error" | "invalid_request"
                if !crate::llm::retry::is_context_length_message(&err.to_string()) =>
            {
                Attempt::Fatal(LlmError::Rejected {
                    url: client.endpoint().to_owned(),
                    status: 200,
                    body: client.quote(err.to_string().as_bytes()),
                })
            }
            _ => client.stream_error(err),
        }
    }
}

impl StreamDecoder for ResponsesAssembler {
    fn push(&mut self, data: &str) -> Result<bool, ChunkError> {
        ResponsesAssembler::push(self, data)
    }

    fn chars(&self) -> usize {
        ResponsesAssembler::chars(self)
    }

    fn chunks(&self) -> usize {
        ResponsesAssembler::chunks(self)
    }

    fn ended(&self) -> bool {
        self.done()
    }

    fn finish(self: Box<Self>) -> Assembled {
        ResponsesAssembler::finish(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::openai::ModelSettings;
    use crate::llm::settings::Provider;
    use serde_json::json;

    fn client() -> OpenAiClient {
        let mut s = ModelSettings::new("http://127.0.0.1:9/v1/", "o4-mini");
        s.provider = Provider::OpenAiResponses;
        s.api_key = Some("sk-secret-responses".into());
        OpenAiClient::new(s).unwrap()
    }

    #[test]
    fn the_endpoint_is_responses_under_the_base_url() {
        assert_eq!(client().endpoint(), "http://127.0.0.1:9/v1/responses");
    }

    #[test]
    fn errors_inside_a_reply_are_classified_by_their_code() {
        let c = client();
        let rate = json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down"});
        assert!(matches!(
            Responses.stream_error(&c, &rate),
            Attempt::Transient(Transient {
                kind: Kind::RateLimit,
                ..
            })
        ));
        let server = json!({"code": "server_error", "message": "boom"});
        assert!(matches!(
            Responses.stream_error(&c, &server),
            Attempt::Transient(Transient {
                kind: Kind::Server,
                ..
            })
        ));
        let invalid =
            json!({"code": "invalid_prompt", "message": "bad prompt sk-secret-responses"});
        match Responses.stream_error(&c, &invalid) {
            Attempt::Fatal(LlmError::Rejected { body, .. }) => {
                assert!(!body.contains("sk-secret-responses"), "{body}");
            }
            _ => panic!("an invalid prompt fails at once"),
        }
        let long = json!({"code": "context_length_exceeded",
            "message": "Your input exceeds the context window of this model."});
        assert!(matches!(
            Responses.stream_error(&c, &long),
            Attempt::Fatal(LlmError::ContextLength { .. })
        ));
    }

    #[test]
    fn a_failed_plain_reply_is_classified_and_garbage_is_a_bad_response() {
        let c = client();
        let failed = json!({"status": "failed", "output": [],
            "error": {"code": "server_error", "message": "boom"}});
        assert!(matches!(
            Responses.parse_completion(&c, failed.to_string().as_bytes()),
            Err(Attempt::Transient(_))
        ));
        for bad in [&b""[..], b"<html>502</html>", b"{\"choices\":[]}"] {
            assert!(matches!(
                Responses.parse_completion(&c, bad),
                Err(Attempt::Fatal(LlmError::BadResponse { .. }))
            ));
        }
    }
}
