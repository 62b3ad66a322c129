"""Generates the Python gRPC stubs of proto/policy_agent.proto on demand.

The stubs are not committed: they are generated with grpc_tools.protoc into
``gen/`` next to this file (or into $POLICY_AGENT_STUBS) the first time they
are needed, and again whenever the proto is newer than them.
"""

import importlib
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_DIR = HERE.parent.parent.parent / "proto"
PROTO = PROTO_DIR / "policy_agent.proto"


def load(out_dir=None):
    """Returns the (messages, services) modules, generating them if needed."""
    out = Path(out_dir or os.environ.get("POLICY_AGENT_STUBS") or HERE / "gen")
    pb2 = out / "policy_agent_pb2.py"
    if not pb2.exists() or pb2.stat().st_mtime < PROTO.stat().st_mtime:
        from grpc_tools import protoc

        out.mkdir(parents=True, exist_ok=True)
        code = protoc.main([
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO),
        ])
        if code != 0:
            raise RuntimeError(f"protoc failed with exit code {code}")
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return importlib.import_module("policy_agent_pb2"), importlib.import_module("policy_agent_pb2_grpc")
