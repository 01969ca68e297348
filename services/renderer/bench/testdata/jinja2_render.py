"""Render the benchmark workload with Python's Jinja2 and time it.

Usage: jinja2_render.py DATA_JSON TEMPLATES_JSON ITERATIONS [OUT_DIR]

DATA_JSON holds, per type, the objects ordered by id with their index key
tuples (computed by the Go index, so both sides index identically) and the
values. TEMPLATES_JSON holds the snippets and outputs. Resources behave as
the Go renderer's stores do: items(), keys(), values() ordered by id,
get(id[, default]), store[id], len, and get_indexed(*keys), which returns
the objects whose leading index keys equal keys (every object for no keys,
nothing for more keys than index_by paths). Snippets drop one trailing
newline and outputs keep theirs, as in the Go engine. Prints one JSON line:
milliseconds per render (median and minimum, and the median CPU time) and
the bytes rendered; with
OUT_DIR, writes each output there once. Wall-clock and CPU (process) time
are both reported: on a shared machine CPU time is the steadier measure.
"""

import json
import os
import sys
import time

import jinja2


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
    env = jinja2.Environment(loader=jinja2.DictLoader(sources), keep_trailing_newline=True, autoescape=False)
    compiled = [(name, env.get_template(key)) for name, key in outputs]

    resources = {t: Store(spec) for t, spec in data["types"].items()}
    ctx = {"resources": resources, "values": data["values"]}

    rendered = {}
    total = 0
    times = []
    cpu = []
    for it in range(max(iterations, 1)):
        start, start_cpu = time.perf_counter(), time.process_time()
        total = 0
        for name, tpl in compiled:
            text = tpl.render(ctx)
            total += len(text.encode())
            if it == 0:
                rendered[name] = text
        times.append((time.perf_counter() - start) * 1000.0)
        cpu.append((time.process_time() - start_cpu) * 1000.0)
    if out_dir:
        for name, text in rendered.items():
            with open(os.path.join(out_dir, name), "w") as f:
                f.write(text)
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
