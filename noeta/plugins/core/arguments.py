"""Reading a tool call's input against the tool's own schema, with errors the model can act on.

Models send what they think the schema says; a wrong type or an unknown key (a typo such
as `timeout` for `timeout_seconds`) is refused by name rather than silently ignored.
"""

from __future__ import annotations

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolError


class Arguments:
    """One call's input; each getter checks the type and range of one key."""

    def __init__(self, tool: str, input: dict[str, JSONValue], schema: dict[str, JSONValue]):
        self.tool = tool
        self.input = input
        properties = schema.get("properties", {})
        known = set(properties) if isinstance(properties, dict) else set()
        unknown = sorted(set(input) - known)
        if unknown:
            raise ToolError(
                f"{tool}: unknown input {', '.join(map(repr, unknown))}; "
                f"it takes {', '.join(map(repr, sorted(known))) or 'no input'}"
            )

    def _missing(self, key: str) -> ToolError:
        return ToolError(f"{self.tool}: {key!r} is required")

    def _wrong(self, key: str, expected: str) -> ToolError:
        value = self.input[key]
        return ToolError(f"{self.tool}: {key!r} must be {expected}, not {value!r}")

    def string(self, key: str) -> str:
        value = self.optional_string(key)
        if value is None:
            raise self._missing(key)
        return value

    def optional_string(self, key: str) -> str | None:
        value = self.input.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        return value

    def integer(self, key: str, default: int, minimum: int = 0, maximum: int | None = None) -> int:
        value = self.optional_integer(key, minimum, maximum)
        return default if value is None else value

    def optional_integer(
        self, key: str, minimum: int = 0, maximum: int | None = None
    ) -> int | None:
        value = self.input.get(key)
        if value is None:
            return None
        # bool is an int subclass: `true` is not a line number.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer")
        if value < minimum or (maximum is not None and value > maximum):
            upper = f" and at most {maximum}" if maximum is not None else ""
            raise self._wrong(key, f"an integer of at least {minimum}{upper}")
        return value

    def number(self, key: str, default: float, maximum: float) -> float:
        """A positive number of at most `maximum`."""
        value = self.input.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(key, "a number")
        if not 0 < value <= maximum:
            raise self._wrong(key, f"a number above 0 and at most {maximum:g}")
        return float(value)

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.input.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value

    def array(self, key: str) -> list[JSONValue]:
        value = self.input.get(key)
        if value is None:
            raise self._missing(key)
        if not isinstance(value, list):
            raise self._wrong(key, "an array")
        return value
