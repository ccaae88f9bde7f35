"""A fake of DCGM's Python bindings, in the shape :class:`exporter.sources.dcgm.DcgmProfiling`
uses (pydcgm's DcgmHandle / DcgmGroup / DcgmFieldGroup, dcgm_structs' constants).

``values``: GPU id -> DCGM field id -> value (None: blank, as DCGM reports an unwatched or
unsupported field). ``down``: the host engine refuses connections.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

DCGM_OPERATION_MODE_AUTO = 1
DCGM_GROUP_DEFAULT = 0
DCGM_FE_GPU = 1


@dataclass
class FakeValue:
    value: float
    isBlank: bool = False


@dataclass
class FakeDcgm:
    values: dict[int, dict[int, float | None]] = field(default_factory=dict)
    down: bool = False
    watched: list[tuple[list[int], int]] = field(default_factory=list)
    connects: int = 0

    def module(self) -> Any:
        fake = self

        class DcgmHandle:
            def __init__(self, ipAddress: str, opMode: int) -> None:
                if fake.down:
                    raise ConnectionError(f"could not connect to {ipAddress}")
                assert opMode == DCGM_OPERATION_MODE_AUTO
                fake.connects += 1

        class DcgmFieldGroup:
            def __init__(self, handle: Any, name: str, fieldIds: list[int]) -> None:
                self.field_ids = fieldIds

        class Samples:
            def WatchFields(self, fg: Any, freq: int, age: float, keep: int) -> None:
                fake.watched.append((fg.field_ids, freq))

            def GetLatest_v2(self, fg: Any) -> Any:
                if fake.down:
                    raise ConnectionError("host engine connection lost")
                values = {
                    gpu: {
                        fid: [FakeValue(0.0, True) if v is None else FakeValue(v)]
                        for fid, v in by_field.items()
                        if fid in fg.field_ids
                    }
                    for gpu, by_field in fake.values.items()
                }
                return SimpleNamespace(values={DCGM_FE_GPU: values})

        class DcgmGroup:
            def __init__(self, handle: Any, groupName: str, groupType: int) -> None:
                assert groupType == DCGM_GROUP_DEFAULT
                self.samples = Samples()

        return SimpleNamespace(
            DcgmHandle=DcgmHandle,
            DcgmGroup=DcgmGroup,
            DcgmFieldGroup=DcgmFieldGroup,
            DCGM_OPERATION_MODE_AUTO=DCGM_OPERATION_MODE_AUTO,
            DCGM_GROUP_DEFAULT=DCGM_GROUP_DEFAULT,
        )
