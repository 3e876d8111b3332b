//! A streamed response (`stream: true`): server-sent events, each `data:` line a chunk whose
//! deltas add text and tool-call pieces, until `data: [DONE]`.
//!
//! [`StreamAssembler`] takes the body in whatever pieces the network delivers (a line, an event,
//! a UTF-8 character can be cut anywhere) and assembles the same [`Draft`] a non-streamed
//! response would give: tool calls by their `index`, their name and arguments concatenated from
//! the pieces. Nothing here does I/O.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::wire::{RawUsage, Usage, content_text, excerpt};
use crate::repair::{Draft, DraftArguments, DraftCall};

/// The longest SSE line kept while waiting for its end: a guard against a server that never
/// sends a newline.
const MAX_LINE: usize = 4 << 20;

/// Assembles a streamed response.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    pending: Vec<u8>,
    text: Option<String>,
    calls: BTreeMap<u64, (String, String)>,
    usage: Usage,
    done: bool,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<RawUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    delta: Option<Delta>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Value,
    #[serde(default)]
    tool_calls: Vec<DeltaCall>,
}

#[derive(Deserialize)]
struct DeltaCall {
    index: Option<u64>,
    function: Option<DeltaFunction>,
}

#[derive(Deserialize)]
struct DeltaFunction {
    name: Option<String>,
    arguments: Option<Value>,
}

impl StreamAssembler {
    /// Feeds the next piece of the body.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.line(&line)?;
        }
        if self.pending.len() > MAX_LINE {
            return Err("a streamed event line is longer than 4 MiB".into());
        }
        Ok(())
    }

    /// True once `data: [DONE]` was read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn line(&mut self, line: &[u8]) -> Result<(), String> {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches(['\r', '\n']);
        // Comments (`: keep-alive`), `event:`/`id:` fields and blank separators carry nothing
        // this adapter reads.
        let Some(data) = line.strip_prefix("data:") else {
            return Ok(());
        };
        let data = data.trim_start();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if self.done || data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            format!(
                "a streamed chunk is not JSON ({e}): {}",
                excerpt(data.as_bytes())
            )
        })?;
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(format!(
                "the server reported an error mid-stream: {message}"
            ));
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage.into();
        }
        for delta in chunk.choices.into_iter().filter_map(|c| c.delta) {
            if let Some(piece) = content_text(&delta.content) {
                self.text.get_or_insert_with(String::new).push_str(&piece);
            }
            for (position, call) in delta.tool_calls.into_iter().enumerate() {
                // Servers that omit `index` send each call whole, in order.
                let index = call.index.unwrap_or(position as u64);
                let entry = self.calls.entry(index).or_default();
                if let Some(f) = call.function {
                    if let Some(name) = f.name {
                        entry.0.push_str(&name);
                    }
                    match f.arguments {
                        Some(Value::String(s)) => entry.1.push_str(&s),
                        Some(Value::Null) | None => {}
                        Some(other) => entry.1.push_str(&other.to_string()),
                    }
                }
            }
        }
        Ok(())
    }

    /// The assembled turn and its usage (a stream cut before `[DONE]` is read as far as it
    /// went; the caller decides whether that is an error).
    pub fn finish(mut self) -> Result<(Draft, Usage), String> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.line(&rest)?;
        }
        let calls = self
            .calls
            .into_values()
            .map(|(name, arguments)| DraftCall {
                name,
                arguments: DraftArguments::Text(arguments),
            })
            .collect();
        Ok((
            Draft {
                text: self.text,
                calls,
            },
            self.usage,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(pieces: &[&[u8]]) -> Result<(Draft, Usage, bool), String> {
        let mut a = StreamAssembler::default();
        for p in pieces {
            a.push(p)?;
        }
        let done = a.is_done();
        let (d, u) = a.finish()?;
        Ok((d, u, done))
    }

    const TOOL_STREAM: &str = concat!(
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n",
        ": keep-alive\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"call_agent\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"agent\\\": \\\"cfo\\\", \"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"c2\",\"function\":{\"name\":\"ledger\",\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"input\\\": \\\"Août?\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":9}}\n\n",
        "data: [DONE]\n\n",
    );

    #[test]
    fn tool_calls_are_assembled_by_index_whatever_the_cuts() {
        let whole = TOOL_STREAM.as_bytes();
        let expected = assemble(&[whole]).unwrap();
        assert!(expected.2);
        assert_eq!(
            expected.1,
            Usage {
                input: 40,
                output: 9
            }
        );
        assert_eq!(expected.0.calls.len(), 2);
        assert_eq!(expected.0.calls[0].name, "call_agent");
        assert_eq!(
            expected.0.calls[0].arguments,
            DraftArguments::Text("{\"agent\": \"cfo\", \"input\": \"Août?\"}".into())
        );
        // Cut at every byte (inside lines and inside the UTF-8 of "û"): the same turn.
        for cut in 1..whole.len() {
            let got = assemble(&[&whole[..cut], &whole[cut..]]).unwrap();
            assert_eq!(got, expected, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(assemble(&bytes).unwrap(), expected);
    }

    #[test]
    fn text_is_concatenated_and_crlf_and_a_missing_final_newline_are_read() {
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"48 \"}}]}\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"250\"}}]}";
        let (draft, _, done) = assemble(&[s.as_bytes()]).unwrap();
        assert_eq!(draft.text.as_deref(), Some("48 250"));
        assert!(!done);
    }

    #[test]
    fn errors_mid_stream_and_garbage_are_reported() {
        assert!(
            assemble(&[b"data: {\"error\":{\"message\":\"overloaded\"}}\n"])
                .unwrap_err()
                .contains("overloaded")
        );
        assert!(assemble(&[b"data: {not json\n"]).is_err());
        let mut a = StreamAssembler::default();
        assert!(a.push(&vec![b'x'; MAX_LINE + 1]).is_err());
    }

    #[test]
    fn nothing_after_done_counts() {
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\ndata: [DONE]\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n";
        assert_eq!(
            assemble(&[s.as_bytes()]).unwrap().0.text.as_deref(),
            Some("a")
        );
    }
}
