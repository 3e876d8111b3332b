"""An independent A2A client for consort's tests: the official A2A Python SDK (`a2a-sdk` on PyPI).

Usage: client.py BASE_URL TOKEN COMMAND [ARGS]

  card                               the agent card, as the SDK resolved it
  send TEXT [--stream] [--immediately] [--agent NAME] [--history N]
                                     SendMessage (SendStreamingMessage with --stream): every
                                     response or stream event, in order
  reply TASK_ID TEXT                 SendMessage continuing a task (an approval decision)
  get TASK_ID [--history N]          GetTask
  list [--page-size N] [--page-token T] [--status S] [--artifacts]
                                     ListTasks
  cancel TASK_ID                     CancelTask
  subscribe TASK_ID                  SubscribeToTask: every stream event, in order

BASE_URL is where the card is found (`http://HOST:PORT` or `http://HOST:PORT/a2a/AGENT`).
TOKEN is `-` for none. Prints one JSON object on stdout: {"events": [...]} or {"result": ...}
with each protobuf message in its JSON form, or {"error": {"type", "message"}} (exit 0) when the
SDK raised, so the caller asserts on it.
"""

import argparse
import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)


def as_json(message) -> dict:
    return json_format.MessageToDict(message)


async def run(args: argparse.Namespace) -> dict:
    headers = {} if args.token == "-" else {"Authorization": f"Bearer {args.token}"}
    async with httpx.AsyncClient(headers=headers, timeout=120) as http:
        if args.command == "card":
            card = await A2ACardResolver(http, args.base_url).get_agent_card()
            return {"result": as_json(card)}
        streaming = getattr(args, "stream", False) or args.command == "subscribe"
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = await create_client(args.base_url, client_config=config)
        if args.command in ("send", "reply"):
            message = Message(
                role=Role.ROLE_USER,
                message_id=str(uuid.uuid4()),
                parts=[Part(text=args.text)],
            )
            if args.command == "reply":
                message.task_id = args.task_id
            if getattr(args, "agent", None):
                message.metadata.update({"agent": args.agent})
            request = SendMessageRequest(message=message)
            if getattr(args, "immediately", False):
                request.configuration.return_immediately = True
            if getattr(args, "history", None) is not None:
                request.configuration.history_length = args.history
            events = [as_json(e) async for e in client.send_message(request)]
            return {"events": events}
        if args.command == "get":
            request = GetTaskRequest(id=args.task_id)
            if args.history is not None:
                request.history_length = args.history
            return {"result": as_json(await client.get_task(request))}
        if args.command == "list":
            request = ListTasksRequest()
            if args.page_size is not None:
                request.page_size = args.page_size
            if args.page_token:
                request.page_token = args.page_token
            if args.status:
                request.status = TaskState.Value(args.status)
            if args.artifacts:
                request.include_artifacts = True
            return {"result": as_json(await client.list_tasks(request))}
        if args.command == "cancel":
            return {"result": as_json(await client.cancel_task(CancelTaskRequest(id=args.task_id)))}
        if args.command == "subscribe":
            request = SubscribeToTaskRequest(id=args.task_id)
            return {"events": [as_json(e) async for e in client.subscribe(request)]}
        raise SystemExit(f"unknown command {args.command}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("token")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("card")
    send = commands.add_parser("send")
    send.add_argument("text")
    send.add_argument("--stream", action="store_true")
    send.add_argument("--immediately", action="store_true")
    send.add_argument("--agent")
    send.add_argument("--history", type=int)
    reply = commands.add_parser("reply")
    reply.add_argument("task_id")
    reply.add_argument("text")
    get = commands.add_parser("get")
    get.add_argument("task_id")
    get.add_argument("--history", type=int)
    listing = commands.add_parser("list")
    listing.add_argument("--page-size", type=int)
    listing.add_argument("--page-token")
    listing.add_argument("--status")
    listing.add_argument("--artifacts", action="store_true")
    cancel = commands.add_parser("cancel")
    cancel.add_argument("task_id")
    subscribe = commands.add_parser("subscribe")
    subscribe.add_argument("task_id")
    args = parser.parse_args()
    try:
        out = asyncio.run(run(args))
    except Exception as e:  # the SDK's errors are what the test asserts on
        out = {"error": {"type": type(e).__name__, "message": str(e)}}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
