#!/usr/bin/env python3
"""Writes the attributes with a default value that onnx's operator schemas define, per op of the
default domain and per schema version, as JSON (tests/conformance/attribute-defaults-1.23.json):

    third_party/onnx-1.23-venv/bin/python scripts/onnx_attribute_defaults.py > tests/conformance/attribute-defaults-1.23.json

{"Op": [{"since": N, "defaults": {"name": {"i": 1} | {"f": 0.5} | {"s": "text"} | {"ints": [...]}
| {"floats": [...]} | {"strings": [...]}}}, ...]}, versions ascending. An attribute without a
default (a required one) or of another type (tensors, graphs) is left out. onnx_conformance
--attribute-defaults adds to each node of a conformance case every default attribute the node
does not set, at the schema version the case's opset selects: the outputs must not change.
"""

import json
import sys

import onnx
from onnx import AttributeProto, defs


def encode(a):
    t = a.type
    if t == AttributeProto.INT:
        return {"i": a.i}
    if t == AttributeProto.FLOAT:
        return {"f": a.f}
    if t == AttributeProto.STRING:
        return {"s": a.s.decode("utf-8")}
    if t == AttributeProto.INTS:
        return {"ints": list(a.ints)}
    if t == AttributeProto.FLOATS:
        return {"floats": list(a.floats)}
    if t == AttributeProto.STRINGS:
        return {"strings": [s.decode("utf-8") for s in a.strings]}
    return None


def main():
    ops = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx"):
            continue
        found = {}
        for name, attr in sorted(schema.attributes.items()):
            if attr.default_value.type == AttributeProto.UNDEFINED:
                continue
            value = encode(attr.default_value)
            if value is not None:
                found[name] = value
        ops.setdefault(schema.name, []).append({"since": schema.since_version, "defaults": found})
    for versions in ops.values():
        versions.sort(key=lambda v: v["since"])
    json.dump({"onnx": onnx.__version__, "ops": dict(sorted(ops.items()))}, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
