"""A restored conversation is built only when read, and equals the one it came from."""

from __future__ import annotations

from noeta.core.ports.model import Message, Text, ToolCall
from noeta.core.rules import snapshot
from noeta.core.rules.conversation import Conversation
from noeta.core.rules.events import ModelReplied, TaskCreated, ToolFinished, ToolStarted
from noeta.core.rules.fold import LoggedEvent, fold


def long_log(turns: int) -> list[LoggedEvent]:
    events: list[object] = [TaskCreated("scripted:x", prompt="go")]
    for n in range(turns):
        call = ToolCall(f"c{n}", "Bash", {"command": f"echo {n}"})
        events += [
            ModelReplied((Text(f"step {n}"), call), "tool_use"),
            ToolStarted(call.id, call.name, call.input),
            ToolFinished(call.id, str(n)),
        ]
    return [LoggedEvent(seq, e) for seq, e in enumerate(events, start=1)]  # type: ignore[arg-type]


def test_a_restored_conversation_is_lazy_and_equal() -> None:
    logged = long_log(50)
    head = fold(logged[:-3])
    restored = snapshot.load(snapshot.dump(head))
    assert isinstance(restored.messages, Conversation)
    assert restored.messages._built is None  # nothing built yet
    assert restored.messages[-1] == head.messages[-1]  # one message, built alone
    assert restored.messages._built is None
    resumed = fold(logged[-3:], restored)
    assert resumed == fold(logged)
    assert list(resumed.messages) == list(fold(logged).messages)
    assert len(resumed.messages) == len(fold(logged).messages)


def test_extending_keeps_the_prefix_lazy() -> None:
    raw = (("user", ((0, "hi"),)),)
    built: list[object] = []

    def build(item: object) -> Message:
        built.append(item)
        return Message("user", (Text("hi"),))

    conversation = Conversation(raw, build).extended([Message("assistant", (Text("yo"),))])
    assert len(conversation) == 2 and conversation[-1].content == (Text("yo"),)
    assert built == []
    assert next(iter(conversation)) == Message("user", (Text("hi"),)) and built == [raw[0]]
