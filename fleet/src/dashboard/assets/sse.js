// Server-sent events read with fetch (EventSource cannot send an Authorization header), and
// polling for hosts whose routes do not stream.

/// Parses a text/event-stream body into {event, data} messages (comment lines such as
/// ": keepalive" are skipped; a message without `event:` is "message").
export async function* sseMessages(body, signal) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = "message";
  let data = [];
  try {
    while (!signal?.aborted) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let newline;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        // A "\r" that ends the chunk may be the first half of a "\r\n": wait for the rest.
        if (newline === buffer.length - 1 && buffer.endsWith("\r")) break;
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
        if (line === "") {
          if (data.length > 0) yield { event, data: data.join("\n") };
          event = "message";
          data = [];
        } else if (line.startsWith(":")) {
          // A comment: the keepalive.
        } else {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let text = colon < 0 ? "" : line.slice(colon + 1);
          if (text.startsWith(" ")) text = text.slice(1);
          if (field === "event") event = text;
          else if (field === "data") data.push(text);
        }
      }
    }
  } finally {
    reader.releaseLock();
  }
}

/// Follows `url` as an event stream, calling `onOpen()` once the stream is open and
/// `onMessage({event, data})` for each message. Resolves "unsupported" when the host answers
/// 400 or 404 (a host without streams: poll instead), "ended" when the stream closes, and
/// throws on other failures (with `.status`).
export async function follow(url, headers, onMessage, signal, onOpen = () => {}) {
  const response = await fetch(url, {
    headers: { ...headers, Accept: "text/event-stream" },
    signal,
    cache: "no-store",
  });
  if (response.status === 400 || response.status === 404) return "unsupported";
  const type = response.headers.get("content-type") || "";
  if (!response.ok || !type.startsWith("text/event-stream")) {
    const error = new Error(`stream ${url}: HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  await onOpen();
  for await (const message of sseMessages(response.body, signal)) {
    onMessage(message);
  }
  return "ended";
}

/// Calls `tick()` now and then every `everyMs` until `signal` aborts; a tick that throws is
/// reported to `onError` and the loop goes on.
export async function poll(tick, everyMs, signal, onError) {
  while (!signal.aborted) {
    try {
      await tick();
    } catch (e) {
      if (signal.aborted) return;
      onError(e);
    }
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, everyMs);
      signal.addEventListener("abort", () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
    });
  }
}
