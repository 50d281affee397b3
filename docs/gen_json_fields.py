#!/usr/bin/env python3
"""Regenerates the "## Fields" section of docs/json.md from docs/schema/run-result.schema.json.

Usage: target/release/hakaru schema > docs/schema/run-result.schema.json
       python3 docs/gen_json_fields.py
Everything in docs/json.md above "## Fields" is hand-written and kept as is.
"""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "schema", "run-result.schema.json")
DOC = os.path.join(HERE, "json.md")


def type_of(p):
    if "$ref" in p:
        return "`%s`" % p["$ref"].split("/")[-1]
    if "anyOf" in p:
        parts = [type_of(x) for x in p["anyOf"]]
        return " or ".join(parts)
    t = p.get("type")
    if isinstance(t, list):
        return " or ".join("null" if x == "null" else type_of({**p, "type": x}) for x in t)
    if t == "array":
        return "array of " + type_of(p.get("items", {}))
    if t == "object" and "properties" not in p:
        return "object"
    if "const" in p:
        return "`%s`" % json.dumps(p["const"])
    return t or "any"


def variant(v):
    desc = v.get("description", "").strip()
    props = v.get("properties", {})
    tag = next((f"`{k}: {json.dumps(p['const'])}`" for k, p in props.items() if "const" in p), None)
    extra = [f"`{k}` ({type_of(p)})" for k, p in props.items() if "const" not in p]
    if "$ref" in v:
        extra.append("the fields of " + type_of(v))
    if "const" in v:
        tag = f"`{json.dumps(v['const'])}`"
    if "enum" in v:
        tag = ", ".join(f"`{json.dumps(e)}`" for e in v["enum"])
    s = tag or ""
    if extra:
        s += (" with " if s else "") + ", ".join(extra)
    return f"- {s}: {desc}" if s else f"- {desc}"


def section(name, d, title=None):
    out = [f"### {title or name}", "", d.get("description", "").strip(), ""]
    if "properties" in d:
        out += ["| field | type | meaning |", "|---|---|---|"]
        for k in sorted(d["properties"]):
            p = d["properties"][k]
            desc = p.get("description", "").replace("\n", " ").replace("|", "\\|")
            out.append(f"| `{k}` | {type_of(p)} | {desc} |")
        out.append("")
    elif "oneOf" in d:
        out.append("One of:")
        out.append("")
        out += [variant(v) for v in d["oneOf"]]
        out.append("")
    else:
        out += [f"Type: {type_of(d)}", ""]
    return "\n".join(out) + "\n"


def main():
    s = json.load(open(SCHEMA))
    parts = ["## Fields\n\n", section("RunResult", s, "RunResult (the document)")]
    for name in sorted(s.get("$defs", {})):
        parts.append(section(name, s["$defs"][name]))
    doc = open(DOC).read()
    head = doc.split("## Fields")[0]
    open(DOC, "w").write(head + "".join(parts).rstrip() + "\n")


if __name__ == "__main__":
    main()
