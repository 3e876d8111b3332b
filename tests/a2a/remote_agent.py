"""A remote A2A agent for the outbound interop tests (tests/a2a_remote.rs), built with the
official A2A Python SDK (PyPI `a2a-sdk[http-server]`) and served by uvicorn.

    python3 remote_agent.py PORT TOKEN

It serves its agent card at /.well-known/agent-card.json and the JSON-RPC binding at /rpc on
127.0.0.1:PORT. Every JSON-RPC request must carry `Authorization: Bearer TOKEN` (the card
declares the scheme); the card itself is public. What it answers depends on the input text:

- containing "reject": the task is REJECTED, saying why;
- containing "fail": the task FAILS, saying why;
- containing "question": the task stops at INPUT_REQUIRED, asking which city;
- containing "crash": the executor raises, which the SDK answers with a JSON-RPC error;
- containing "hang": it works for 60 s before answering (for timeouts);
- containing "later": it answers at once with the task still WORKING and completes it 1.5 s
  later with an artifact "forecast for <input>: rain" (the caller has to poll GetTask);
- anything else: the task COMPLETES with an artifact "forecast for <input>: sunny".

It prints one line, "listening on PORT", once the server accepts connections.
"""

import asyncio
import logging
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)


class Forecaster(AgentExecutor):
    def __init__(self):
        self.background = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()

        def say(words: str):
            return new_text_message(
                words,
                role=Role.ROLE_AGENT,
                context_id=context.context_id,
                task_id=context.task_id,
            )

        if "reject" in text:
            await updater.reject(say("I only forecast the weather; I will not take this."))
        elif "fail" in text:
            await updater.failed(say("the forecast model crashed"))
        elif "question" in text:
            await updater.requires_input(say("Which city do you mean?"))
        elif "crash" in text:
            raise RuntimeError("the forecaster crashed")
        elif "later" in text:
            # Answers with the task still WORKING and finishes it in the background, so the
            # caller has to poll GetTask.
            async def finish():
                await asyncio.sleep(1.5)
                await updater.add_artifact([Part(text=f"forecast for {text}: rain")], name="forecast")
                await updater.complete()

            self.background.add(asyncio.create_task(finish()))
        else:
            if "hang" in text:
                await asyncio.sleep(60)
            await updater.add_artifact([Part(text=f"forecast for {text}: sunny")], name="forecast")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


class BearerOnly(BaseHTTPMiddleware):
    def __init__(self, app, token: str):
        super().__init__(app)
        self.token = token

    async def dispatch(self, request, call_next):
        if request.url.path.startswith("/.well-known/"):
            return await call_next(request)
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
        return await call_next(request)


def main() -> None:
    # The "crash" mode's exception is expected: the SDK would print its traceback twice.
    for logger in ("a2a.server.agent_execution.active_task", "a2a.server.routes.jsonrpc_dispatcher"):
        logging.getLogger(logger).setLevel(logging.CRITICAL)
    port = int(sys.argv[1])
    token = sys.argv[2]
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="forecaster",
        description="Forecasts the weather for whatever it is asked about",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{base}/rpc", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="forecast",
                name="forecast",
                description="a weather forecast",
                tags=["weather"],
            )
        ],
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer")
            )
        },
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList(list=[])})],
    )
    handler = DefaultRequestHandler(
        agent_executor=Forecaster(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/rpc")
    app = Starlette(routes=routes)
    app.add_middleware(BearerOnly, token=token)

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)

    async def serve():
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
                return
            await asyncio.sleep(0.05)
        print(f"listening on {port}", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
