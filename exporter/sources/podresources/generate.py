"""Regenerate api_pb2.py and api_pb2_grpc.py from api.proto with grpcio-tools.

``python -m exporter.sources.podresources.generate`` (from the repository root). The stubs are
generated into a temporary directory first, so ``generated()`` can also be compared with the
committed files by a test without touching them.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PROTO = HERE / "api.proto"
STUBS = ("api_pb2.py", "api_pb2_grpc.py")

# The stamps of the grpcio-tools release that generated a stub: a patch release of the tools
# rewrites them and nothing else, so the stale-stub check compares the stubs without them.
_STAMPS = (
    (re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.M), "GRPC_GENERATED_VERSION = ''"),
    (re.compile(r"^# Protobuf Python Version: .*$", re.M), "# Protobuf Python Version:"),
    (
        re.compile(
            r"(ValidateProtobufRuntimeVersion\(\n\s*_runtime_version\.Domain\.\w+,)"
            r"\n\s*\d+,\n\s*\d+,\n\s*\d+,"
        ),
        r"\1",
    ),
)


def generated() -> dict[str, str]:
    """File name -> the stub grpcio-tools generates now from api.proto."""
    from grpc_tools import protoc  # test/dev dependency only

    rel = PROTO.relative_to(ROOT)
    with tempfile.TemporaryDirectory() as out:
        rc = protoc.main(
            ["protoc", f"-I{ROOT}", f"--python_out={out}", f"--grpc_python_out={out}", str(rel)]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed with {rc}")
        return {name: (Path(out) / rel.parent / name).read_text() for name in STUBS}


def unstamped(text: str) -> str:
    """A stub without the version stamps of the grpcio-tools release that generated it."""
    for pattern, replacement in _STAMPS:
        text = pattern.sub(replacement, text)
    return text


def main() -> int:
    for name, text in generated().items():
        (HERE / name).write_text(text)
        print(f"wrote {HERE / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
