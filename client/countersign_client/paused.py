"""Where a paused agent run waits for Countersign: tool call id -> its intent and run state.

An agent framework pauses a run on a tool call that needs approval and hands back a state
to resume later. `PausedCall` keeps that serialized state beside the Countersign intent the
call froze, so that any process can resume the run once Countersign has decided.
`MemoryStateStore` lives as long as the process; `FileStateStore` survives restarts.
Neither imports an agent framework.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class PausedCall:
    """One tool call waiting for Countersign, and the run state to resume it from."""

    call_id: str  # the framework's tool call id
    tool_name: str  # the framework's name of the tool
    run_id: str  # Countersign's run
    action_id: str  # Countersign's logical action id, derived from call_id
    action: str | None  # Countersign's action (its `id`); None until it is proposed
    state: str  # the framework's serialized run state
    arguments: str = "{}"  # the call's arguments as the model gave them (JSON)
    refused: str = ""  # why Countersign refused to freeze the intent, if it did

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PausedCall:
        return cls(**data)


class StateStore(Protocol):
    """Keeps paused calls by their tool call id. A later `put` of the same call replaces it."""

    def put(self, paused: PausedCall) -> None: ...

    def get(self, call_id: str) -> PausedCall | None: ...

    def delete(self, call_id: str) -> None: ...

    def call_ids(self) -> list[str]: ...


class MemoryStateStore:
    """Paused calls in a dict: for tests and for agents that never restart."""

    def __init__(self) -> None:
        self._calls: dict[str, PausedCall] = {}

    def put(self, paused: PausedCall) -> None:
        self._calls[paused.call_id] = paused

    def get(self, call_id: str) -> PausedCall | None:
        return self._calls.get(call_id)

    def delete(self, call_id: str) -> None:
        self._calls.pop(call_id, None)

    def call_ids(self) -> list[str]:
        return sorted(self._calls)


class FileStateStore:
    """One JSON file per paused call in `directory`, replaced atomically, so a crash leaves
    either the old state or the new one, never half of either."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, call_id: str) -> Path:
        # Call ids are the model provider's strings: hashed, they make safe file names.
        return self.directory / (hashlib.sha256(call_id.encode()).hexdigest()[:32] + ".json")

    def put(self, paused: PausedCall) -> None:
        handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(paused.to_json(), file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self._path(paused.call_id))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def get(self, call_id: str) -> PausedCall | None:
        try:
            data = json.loads(self._path(call_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return PausedCall.from_json(data)

    def delete(self, call_id: str) -> None:
        self._path(call_id).unlink(missing_ok=True)

    def call_ids(self) -> list[str]:
        found = (json.loads(path.read_text(encoding="utf-8")) for path in self._files())
        return sorted(data["call_id"] for data in found)

    def _files(self) -> list[Path]:
        return sorted(self.directory.glob("*.json"))
