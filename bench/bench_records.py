"""bench/bench_records.py: reads the JSON-lines files that `octet bench ... --json` and the
torch references beside it write (one record per line), for the bench scripts."""
import json


def read_records(path, bench=None):
    """The records of the JSON-lines file `path`, blank lines skipped; with `bench`, only
    those whose "bench" field is `bench`."""
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if bench is None or r.get("bench") == bench]
