// The dashboard's stream reader (fleet/src/dashboard/assets/sse.js) against a real HTTP server
// speaking the event-stream contract of `GET /jobs?follow=1` and `GET /runs/{id}/events?follow=1`:
// `event:` / `data:` lines, messages split across network chunks and line endings, `: keepalive`
// comments, and a 400 or 404 from a host without streams, which means "poll instead".
// Run with `node --test tests/browser/sse.test.mjs` (tests/dashboard.rs does).

import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";

import { follow, sseMessages } from "../../fleet/src/dashboard/assets/sse.js";

/// A server on loopback whose `GET /stream` writes `chunks` with a pause between them, and whose
/// other paths answer `status`.
async function serve(chunks, status = 404) {
  const asked = [];
  const server = createServer(async (request, response) => {
    asked.push(request.headers);
    if (request.url !== "/stream") {
      response.writeHead(status, { "Content-Type": "application/json" });
      response.end(JSON.stringify({ error: { code: "bad_query", message: "no follow here" } }));
      return;
    }
    response.writeHead(200, { "Content-Type": "text/event-stream" });
    for (const chunk of chunks) {
      response.write(chunk);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    response.end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, asked, url: `http://127.0.0.1:${server.address().port}` };
}

test("messages are read across chunks, line endings and keepalives", async () => {
  const run = { id: "run_1", agent: "cmo", status: "running" };
  const { server, asked, url } = await serve([
    ": keepalive\n\n",
    "event: run\nda",
    `ta: ${JSON.stringify(run)}\r`,
    "\n\r\n",
    "event: event\ndata: {\"seq\": 1,\n",
    "data: \"kind\": \"created\"}\n\n: keepalive\n\n",
    "event: end\ndata: {\"status\": \"succeeded\"}\n\n",
  ]);
  try {
    const seen = [];
    const how = await follow(`${url}/stream`, { Authorization: "Bearer t" }, (m) => seen.push(m),
      undefined, () => seen.push({ event: "(open)" }));
    assert.equal(how, "ended");
    assert.deepEqual(seen.shift(), { event: "(open)" });
    assert.deepEqual(seen.map((m) => m.event), ["run", "event", "end"]);
    assert.deepEqual(JSON.parse(seen[0].data), run);
    assert.deepEqual(JSON.parse(seen[1].data), { seq: 1, kind: "created" });
    assert.equal(JSON.parse(seen[2].data).status, "succeeded");
    assert.equal(asked[0].authorization, "Bearer t");
    assert.equal(asked[0].accept, "text/event-stream");
  } finally {
    server.close();
  }
});

test("a host without streams answers 400 or 404: the page polls instead", async () => {
  for (const status of [400, 404]) {
    const { server, url } = await serve([], status);
    try {
      const how = await follow(`${url}/jobs?follow=1`, {}, () => assert.fail("no message"));
      assert.equal(how, "unsupported");
    } finally {
      server.close();
    }
  }
});

test("any other failure is an error with its status", async () => {
  const { server, url } = await serve([], 401);
  try {
    await assert.rejects(follow(`${url}/jobs?follow=1`, {}, () => {}), (e) => e.status === 401);
  } finally {
    server.close();
  }
});

test("a message without an event name is a plain message; a trailing partial one is dropped", async () => {
  const body = new Blob(["data: a\n\ndata: b\ndata: c\n\nevent: run\ndata: cut"]).stream();
  const seen = [];
  for await (const m of sseMessages(body)) seen.push(m);
  assert.deepEqual(seen, [
    { event: "message", data: "a" },
    { event: "message", data: "b\nc" },
  ]);
});
