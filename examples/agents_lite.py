"""Request/reply between two agents, each conversation a lite topic (RocketMQ 5.5 lite topics,
docs/how-to/lite-topics.md).

The *planner* agent opens conversations: for each one it subscribes a lite topic of its own
(``conv-<n>``, under the LITE parent topic ``agent-replies``) and sends a question to the
*worker* agent through the ordinary topic ``agent-tasks``, naming that lite topic in a
``reply_to`` property. The worker answers in several chunks (as a language model streams
tokens) to the lite topic named, then a final ``[done]``. The planner reads each
conversation's reply in order, and drops the lite topic when the conversation ends: a lite
topic lives as long as one conversation, and a broker holds as many of them as there are
conversations going on.

Run it against a RocketMQ 5.5+ cluster (brokers with ``enableLmq=true`` and
``enableMultiDispatch=true``; give the name server, not a proxy) or the embedded broker::

    aiorocket broker --port 9876 &
    python -m examples.agents_lite --conversations 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from dataclasses import dataclass, field

import aiorocket as rmq

__all__ = ["Planner", "main", "setup", "worker"]

TASKS = "agent-tasks"
REPLIES = "agent-replies"
WORKER_GROUP = "worker-agent"
PLANNER_GROUP = "planner-agent"
DONE = b"[done]"


async def setup(namesrv: str) -> None:
    """Create the task topic, the LITE parent of the reply channels and the planner's group
    bound to it (what an operator does once)."""
    async with rmq.Admin(namesrv=namesrv) as admin:
        await admin.create_topic(TASKS, queues=4)
        # Idle reply channels are deleted an hour after their last message.
        await admin.create_topic(REPLIES, queues=4, message_type="LITE", lite_topic_expiration=60)
        await admin.create_group(PLANNER_GROUP, lite_bind_topic=REPLIES)


async def worker(namesrv: str, stop: asyncio.Event) -> None:
    """The worker agent: answer each question, chunk by chunk, on the lite topic it names."""
    tasks = rmq.SimpleConsumer(
        group=WORKER_GROUP, namesrv=namesrv, consume_from="first", await_duration=1.0
    )
    tasks.subscribe(TASKS)
    async with tasks, rmq.Producer(namesrv=namesrv, group=WORKER_GROUP) as producer:
        while not stop.is_set():
            for task in await tasks.receive(16):
                reply_to = task.properties["reply_to"]
                for word in f"answer to {task.body.decode()}".split():
                    await producer.send(rmq.Message(REPLIES, word, lite_topic=reply_to))
                await producer.send(rmq.Message(REPLIES, DONE, lite_topic=reply_to))
                await tasks.ack(task)


@dataclass
class Planner:
    """The planner agent: one lite topic per open conversation, its replies in order."""

    namesrv: str
    replies: dict[str, list[str]] = field(default_factory=dict)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    _open: int = 0

    async def run(self, conversations: int) -> None:
        """Open ``conversations`` conversations and read their replies until all ended."""
        inbox = rmq.LiteConsumer(
            group=PLANNER_GROUP, namesrv=self.namesrv, topic=REPLIES, await_duration=1.0
        )
        async with inbox, rmq.Producer(namesrv=self.namesrv, group=PLANNER_GROUP) as producer:
            for n in range(conversations):
                channel = f"conv-{n}"
                # subscribe first: the reply must find its reader
                await inbox.subscribe_lite(channel)
                self.replies[channel] = []
                self._open += 1
                question = rmq.Message(TASKS, f"question {n}", properties={"reply_to": channel})
                await producer.send(question)
            while self._open:
                for msg in await inbox.receive(32):
                    await self._on_reply(inbox, msg)
        self.finished.set()

    async def _on_reply(self, inbox: rmq.LiteConsumer, msg: rmq.PoppedMessage) -> None:
        channel = msg.lite_topic
        assert channel is not None
        if msg.body == DONE:
            await inbox.unsubscribe_lite(channel)  # the conversation is over
            self._open -= 1
        else:
            self.replies[channel].append(msg.body.decode())
        await inbox.ack(msg)


async def main(namesrv: str = "127.0.0.1:9876", conversations: int = 20) -> Planner:
    """Run both agents until every conversation got its whole reply; returns the planner."""
    await setup(namesrv)
    stop = asyncio.Event()
    worker_task = asyncio.create_task(worker(namesrv, stop))
    planner = Planner(namesrv)
    try:
        await planner.run(conversations)
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await worker_task
    for channel, words in sorted(planner.replies.items())[:3]:
        print(channel, " ".join(words))
    print(f"{len(planner.replies)} conversations, each answered in order on its own lite topic")
    return planner


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--conversations", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.namesrv, args.conversations))
