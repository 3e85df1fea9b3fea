"""What a run records about its ``fn``: the :class:`FnIdentity` record.

* ``name``: module and qualified name;
* ``code``: a digest of its bytecode, constants and names (a fixed bug changes it);
* ``config``: one short digest per piece of *configuration* the engine could hash by value:
  a ``functools.partial``'s arguments, closure cells, default arguments, a bound method's
  ``__self__`` / a callable instance's attributes, and the module globals fn's code names,
  where they are plain data (numbers, strings, bytes, containers of those, small numpy arrays,
  and enums, namedtuples, dataclasses, attrs classes and pydantic models of plain data, by
  value). A dataclass, attrs or pydantic object has one part for its class and one per field
  (``partial argument config.temperature``). Labels say where each piece came from (``closure factor``, ``self.scale``,
  ``partial argument 0``, ``global THRESHOLD``), so a refusal can name what changed;
* ``skipped``: what was reachable but not hashed (large or arbitrary objects): a change
  there cannot be detected, and the engine says so when the run starts.

Modules, functions and classes that fn refers to are code, not configuration, and are not
hashed. A record written before configuration was recorded has ``config`` None: it never
counts as a change (older manifests still resume).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import CorruptStateError
from .hints import START_OVER

__all__ = ["FnIdentity", "MAX_CONFIG_PARTS"]

MAX_CONFIG_PARTS = 256  # labels recorded per fn (more are folded into one "..." part)
_LABEL_MAX = 200
_DIGEST_RE = re.compile(r"^[0-9a-f]{1,64}$")


@dataclass(frozen=True)
class FnIdentity:
    name: str
    code: str = ""  # "" when fn has no Python code (a builtin)
    config: Mapping[str, str] | None = None  # label -> digest; None: not recorded (older runs)
    skipped: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "code": self.code,
            "config": dict(self.config) if self.config is not None else None,
            "skipped": list(self.skipped),
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> FnIdentity:
        """Raises CorruptStateError naming ``where`` when the record was damaged or hand-edited."""

        def bad(what: str) -> CorruptStateError:
            return CorruptStateError(f"fn identity in {where} {what}; it was damaged or edited by hand. {START_OVER}")

        if not isinstance(data, dict):
            raise bad("is not an object")
        name, code = data.get("name"), data.get("code", "")
        if not isinstance(name, str) or not isinstance(code, str) or len(name) > 1000 or len(code) > 64:
            raise bad("has an invalid name or code digest")
        config = data.get("config")
        if config is not None:
            if not isinstance(config, dict) or len(config) > MAX_CONFIG_PARTS + 1:
                raise bad("has an invalid config")
            for label, digest in config.items():
                if not isinstance(label, str) or len(label) > _LABEL_MAX:
                    raise bad("has an invalid config label")
                if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
                    raise bad(f"has an invalid digest for {label[:80]!r}")
        skipped = data.get("skipped") or []
        if not isinstance(skipped, list) or not all(isinstance(s, str) and len(s) <= _LABEL_MAX for s in skipped):
            raise bad("has an invalid list of skipped parts")
        return cls(
            name=name,
            code=code,
            config=dict(config) if config is not None else None,
            skipped=tuple(skipped[:MAX_CONFIG_PARTS]),
        )

    def code_changed(self, recorded: FnIdentity) -> bool:
        """The code differs from ``recorded``'s (compared only when both are known)."""
        return bool(self.code) and bool(recorded.code) and self.code != recorded.code

    def config_changes(self, recorded: FnIdentity) -> list[str]:
        """Labels of the configuration that differ from ``recorded`` (added, removed or changed);
        [] when either side did not record a configuration."""
        if self.config is None or recorded.config is None:
            return []
        labels = sorted(set(self.config) | set(recorded.config))
        # a part the recorded run could not hash (it listed it in ``skipped``) and this one can
        # (a config object hashed by value since) is not a change: runs recorded before resume
        was_skipped = {entry.split(" (", 1)[0] for entry in recorded.skipped}
        return [
            label
            for label in labels
            if self.config.get(label) != recorded.config.get(label)
            and not (label not in recorded.config and _under(label, was_skipped))
            and not (label not in recorded.config and self._same_object_before(label, recorded))
        ]

    def _same_object_before(self, label: str, recorded: FnIdentity) -> bool:
        """``label`` is an undeclared attribute of a config object (``config.extra``) whose class
        and declared fields are unchanged, in a record that did not hash such attributes
        (written before they were): not a change, so those runs still resume. A new declared
        field changes the object's own part (its class and field names), so it is not this."""
        parent = label.rpartition(".")[0]
        if not parent or self.config is None or recorded.config is None:
            return False
        return parent in recorded.config and recorded.config[parent] == self.config.get(parent)


def _under(label: str, parts: set[str]) -> bool:
    """``label`` is one of ``parts`` or a field of one (``config.temperature`` of ``config``)."""
    return label in parts or any(label.startswith(part + ".") for part in parts)


def describe_changes(labels: list[str], limit: int = 6) -> str:
    """``closure factor, self.scale and 2 more`` for a message."""
    shown = ", ".join(labels[:limit])
    return shown + (f" and {len(labels) - limit} more" if len(labels) > limit else "")
