"""Render the benchmark workload with Python's Jinja2 and time it.

Usage: jinja2_render.py DATA_JSON TEMPLATES_JSON ITERATIONS [OUT_DIR]

DATA_JSON holds, per type, the objects ordered by id with their index key
tuples (computed by the Go index, so both sides index identically) and the
values. TEMPLATES_JSON holds the snippets, fragments and outputs, and the
deployed path of every output (for get_path). Resources behave as
the Go renderer's stores do: items(), keys(), values() ordered by id,
get(id[, default]), store[id], len, and get_indexed(*keys), which returns
the objects whose leading index keys equal keys (every object for no keys,
nothing for more keys than index_by paths). Snippets drop one trailing
newline and outputs keep theirs, as in the Go engine.

The engine's own functions are implemented as it documents them: every
render first renders each fragment (by name) for each object of its type
(by id), with `obj` and `id` bound, keeping its output and its parts
(`{% part "p" %}...{% endpart %}`, a call block appending to the entry's
part p); fragments(name[, part]) joins them in id order and
fragment(name, id[, part]) returns one. register_error(type, id, message)
records an error (exact duplicates dropped; the fragments' errors come
first), get_path answers from the paths, b64decode decodes standard
base64, and `do` is enabled. Prints one JSON line:
milliseconds per render (median and minimum, and the median CPU time) and
the bytes rendered; with
OUT_DIR, writes each output there once, and the registered errors, one
"<type> <id>: <message>" line each, to OUT_DIR/.errors. Wall-clock and CPU (process) time
are both reported: on a shared machine CPU time is the steadier measure.
"""

import base64
import json
import os
import sys
import time

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension


def key_string(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


class Store:
    def __init__(self, spec):
        self._count = spec["index_by_count"]
        self._ids = [o["id"] for o in spec["objects"]]
        self._objs = {o["id"]: o["obj"] for o in spec["objects"]}
        self._prefix = [dict() for _ in range(self._count)]
        for o in spec["objects"]:
            keys = o["keys"]
            for k in range(self._count):
                self._prefix[k].setdefault(tuple(keys[: k + 1]), []).append(o["obj"])

    def items(self):
        return [(i, self._objs[i]) for i in self._ids]

    def keys(self):
        return list(self._ids)

    def values(self):
        return [self._objs[i] for i in self._ids]

    def get(self, key, default=None):
        return self._objs.get(key, default)

    def __getitem__(self, key):
        return self._objs[key]

    def __len__(self):
        return len(self._ids)

    def get_indexed(self, *keys):
        if not keys:
            return self.values()
        if len(keys) > self._count:
            return []
        return list(self._prefix[len(keys) - 1].get(tuple(key_string(k) for k in keys), []))


class PartExtension(Extension):
    """{% part "name" %}body{% endpart %}: appends body to the part."""

    tags = {"part"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        name = parser.parse_expression()
        body = parser.parse_statements(("name:endpart",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_part", [name]), [], [], body).set_lineno(lineno)

    def _part(self, name, caller):
        sink = self.environment.weft_parts
        sink[name] = sink.get(name, "") + caller()
        return ""


class Render:
    """The per-render state behind the engine's functions."""

    def __init__(self, env, fragments, resources, ctx):
        self.env = env
        self.fragments = fragments
        self.resources = resources
        self.ctx = ctx
        self.errors = []
        self.seen = set()
        self.entries = {}

    def register_error(self, typ, id, message):
        e = (str(typ), str(id), str(message))
        if e not in self.seen:
            self.seen.add(e)
            self.errors.append(e)
        return ""

    def render_fragments(self):
        for name in sorted(self.fragments):
            for_each, tpl = self.fragments[name]
            store = self.resources.get(for_each)
            entries = {}
            for id, obj in (store.items() if store is not None else []):
                self.env.weft_parts = {}
                out = tpl.render(dict(self.ctx, obj=obj, id=id))
                entries[id] = (out, self.env.weft_parts)
            self.entries[name] = entries

    def text(self, entry, part):
        return entry[0] if not part else entry[1].get(part, "")

    def fragments_function(self, name, part=""):
        return "".join(self.text(e, part) for e in self.entries[name].values())

    def fragment_function(self, name, id, part=""):
        e = self.entries[name].get(id)
        return self.text(e, part) if e else ""


def b64decode(s):
    s = s.strip()
    return base64.b64decode(s + "=" * (-len(s.rstrip("=")) % 4)).decode()


def main():
    data_path, templates_path, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out_dir = sys.argv[4] if len(sys.argv) > 4 else None
    with open(data_path) as f:
        data = json.load(f)
    with open(templates_path) as f:
        templates = json.load(f)

    sources = {}
    for name, text in templates["snippets"].items():
        sources[name] = text[:-1] if text.endswith("\n") else text
    outputs = []
    for i, o in enumerate(templates["outputs"]):
        key = "\x00output/%d" % i
        sources[key] = o["text"]
        outputs.append((o["name"], key))
    for name, f in templates.get("fragments", {}).items():
        sources["\x00fragment/" + name] = f["text"]
    env = jinja2.Environment(loader=jinja2.DictLoader(sources), keep_trailing_newline=True, autoescape=False,
                             extensions=["jinja2.ext.do", PartExtension])
    paths = templates.get("paths", {})
    env.filters["get_path"] = lambda name, kind: paths["%s\x00%s" % (kind, name)]
    env.filters["b64decode"] = b64decode
    compiled = [(name, env.get_template(key)) for name, key in outputs]
    fragments = {name: (f["for_each"], env.get_template("\x00fragment/" + name))
                 for name, f in templates.get("fragments", {}).items()}

    resources = {t: Store(spec) for t, spec in data["types"].items()}

    rendered = {}
    errors = []
    total = 0
    times = []
    cpu = []
    for it in range(max(iterations, 1)):
        start, start_cpu = time.perf_counter(), time.process_time()
        ctx = {"resources": resources, "values": data["values"]}
        r = Render(env, fragments, resources, ctx)
        ctx.update(register_error=r.register_error, fragments=r.fragments_function, fragment=r.fragment_function)
        r.render_fragments()
        total = 0
        for name, tpl in compiled:
            text = tpl.render(ctx)
            total += len(text.encode())
            if it == 0:
                rendered[name] = text
        errors = r.errors
        times.append((time.perf_counter() - start) * 1000.0)
        cpu.append((time.process_time() - start_cpu) * 1000.0)
    if out_dir:
        for name, text in rendered.items():
            with open(os.path.join(out_dir, name), "w") as f:
                f.write(text)
        with open(os.path.join(out_dir, ".errors"), "w") as f:
            f.writelines("%s %s: %s\n" % e for e in errors)
    times.sort()
    cpu.sort()
    print(json.dumps({
        "ms_median": times[len(times) // 2],
        "ms_min": times[0],
        "cpu_ms_median": cpu[len(cpu) // 2],
        "bytes": total,
        "renders": len(times),
    }))


if __name__ == "__main__":
    main()
