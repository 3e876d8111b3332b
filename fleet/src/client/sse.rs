//! Reading a `text/event-stream` body as it arrives: bytes in, whole events out.
//!
//! The parser keeps the unfinished line and the event being built between chunks, so a chunk
//! boundary anywhere (inside a line, between `\r` and `\n`, inside a UTF-8 character) changes
//! nothing. It follows the event-stream format: `event:`, `data:` (several join with `\n`),
//! `id:`, comment lines starting with `:` ignored, an empty line ends an event. It does no I/O
//! and knows nothing of what the events mean.

/// One event of the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; `message` when the event named none.
    pub(crate) kind: String,
    /// The `data:` lines, joined with `\n`.
    pub(crate) data: String,
    /// The `id:` field, if the event had one.
    pub(crate) id: Option<String>,
}

/// The longest line kept while waiting for its end: a peer that sends more without a line
/// break is not speaking this format.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    /// The last byte seen was a `\r`: a `\n` right after it ends no second line.
    after_cr: bool,
    kind: Option<String>,
    data: Option<String>,
    id: Option<String>,
}

/// The stream broke the format.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LineTooLong;

impl SseParser {
    /// Feeds the next chunk; returns the events it completed, in order.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, LineTooLong> {
        let mut events = Vec::new();
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            match byte {
                b'\n' if after_cr => {}
                b'\r' | b'\n' => {
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_ended(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    if self.line.len() >= MAX_LINE {
                        return Err(LineTooLong);
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(events)
    }

    fn line_ended(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take();
            let kind = self.kind.take();
            let id = self.id.take();
            // An event with no data is dispatched as nothing, as browsers do.
            return data.map(|data| SseEvent {
                kind: kind.unwrap_or_else(|| "message".to_owned()),
                data,
                id,
            });
        }
        if line.first() == Some(&b':') {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.kind = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        chunks
            .iter()
            .flat_map(|c| parser.push(c).unwrap_or_default())
            .collect()
    }

    fn event(kind: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            kind: kind.into(),
            data: data.into(),
            id: id.map(str::to_owned),
        }
    }

    #[test]
    fn events_come_out_whole_whatever_the_chunk_boundaries() {
        let body =
            "event: event\nid: 3\ndata: {\"seq\":3}\n\n: keepalive\n\nevent: end\ndata: {}\n\n";
        let expected = vec![
            event("event", "{\"seq\":3}", Some("3")),
            event("end", "{}", None),
        ];
        assert_eq!(all(&[body.as_bytes()]), expected);
        for split in 0..body.len() {
            let (a, b) = body.as_bytes().split_at(split);
            assert_eq!(all(&[a, b]), expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
        assert_eq!(all(&bytes), expected);
    }

    #[test]
    fn crlf_and_cr_end_lines_and_data_lines_join() {
        assert_eq!(
            all(&[b"data: a\r\ndata: b\r\rdata:c\n\n"]),
            vec![event("message", "a\nb", None), event("message", "c", None)]
        );
        // A \r at the end of one chunk and its \n at the start of the next are one line end.
        assert_eq!(
            all(&[b"data: a\r", b"\n\r\n"]),
            vec![event("message", "a", None)]
        );
    }

    #[test]
    fn comments_fields_without_values_and_unknown_fields_are_handled() {
        assert_eq!(
            all(&[b": hello\nretry: 10\ndata\nevent: x\n\n"]),
            vec![event("x", "", None)]
        );
        // An event with no data line is not dispatched.
        assert_eq!(all(&[b"event: x\nid: 1\n\n"]), vec![]);
    }

    #[test]
    fn a_line_that_never_ends_is_refused() {
        let mut parser = SseParser::default();
        let big = vec![b'a'; MAX_LINE];
        assert!(parser.push(&big).is_ok());
        assert_eq!(parser.push(b"a"), Err(LineTooLong));
    }
}
