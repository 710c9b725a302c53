"""The scanner's cache of parsed references: one parse per reference text, same findings, bounded."""

from __future__ import annotations

import threading

from hackscan.config import Config
from hackscan.context import ReferenceCache
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission
from hackscan.python import module as module_mod

REFERENCE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)

N = 4096

def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]

def get_init_inputs():
    return []
'''

# a torch rewrite with a shape guard on the task's size: rules that need the reference fire
CANDIDATE = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        if a.shape[0] == 4096:
            return torch.mm(a, b)
        return torch.matmul(a, b)
'''


def _key(report):
    return [(f.rule, f.location.line, f.location.column, f.message, f.severity) for f in report.findings]


def _count_parses(monkeypatch) -> list[str]:
    parsed: list[str] = []
    original = module_mod.HostModule.parse

    def parse(text: str, path: str = "<string>"):
        parsed.append(path)
        return original(text, path)

    monkeypatch.setattr(module_mod.HostModule, "parse", staticmethod(parse))
    return parsed


def test_one_reference_is_parsed_once_for_many_candidates(monkeypatch) -> None:
    parsed = _count_parses(monkeypatch)
    scanner = StaticScanner(Config(mode="audit"))
    subs = [Submission(path=f"c{i}.py", code=CANDIDATE, reference=REFERENCE, reference_path="ref.py")
            for i in range(3)]
    reports = [scanner.scan(s) for s in subs]
    assert parsed.count("ref.py") == 1
    assert len(scanner.references) == 1
    assert any(f.rule == "HS105" for f in reports[0].findings)
    assert _key(reports[0]) == _key(reports[1]) == _key(reports[2])


def test_cached_and_uncached_scans_agree() -> None:
    sub = Submission(path="c.py", code=CANDIDATE, reference=REFERENCE, reference_path="ref.py")
    cached = StaticScanner(Config(mode="audit"))
    uncached = StaticScanner(Config(mode="audit"), reference_cache_size=0)
    first, second = cached.scan(sub), cached.scan(sub)
    plain = uncached.scan(sub)
    assert len(uncached.references) == 0
    assert _key(first) == _key(second) == _key(plain)
    assert first.skipped == plain.skipped


def test_cache_is_bounded_and_keeps_the_most_recent() -> None:
    cache = ReferenceCache(size=2)
    texts = [REFERENCE.replace("4096", str(n)) for n in (1000, 2000, 3000)]
    entries = [cache.get(t, "ref.py") for t in texts]
    assert len(cache) == 2
    assert cache.get(texts[2], "ref.py") is entries[2]
    assert cache.get(texts[0], "ref.py") is not entries[0]  # evicted, parsed again
    assert cache.get(texts[1], "other.py") is not entries[1]  # the path is part of the key


def test_unparsable_reference_is_cached_as_none() -> None:
    cache = ReferenceCache(size=4)
    entry = cache.get("def broken(:\n", "ref.py")
    assert entry.module is None
    assert cache.get("def broken(:\n", "ref.py") is entry
    sub = Submission(path="c.py", code=CANDIDATE, reference="def broken(:\n")
    report = StaticScanner(Config(mode="audit")).scan(sub)
    assert any(s.reason == "the reference could not be parsed" for s in report.skipped)


def test_threads_share_one_scanner() -> None:
    scanner = StaticScanner(Config(mode="audit"))
    sub = Submission(path="c.py", code=CANDIDATE, reference=REFERENCE, reference_path="ref.py")
    expected = _key(StaticScanner(Config(mode="audit"), reference_cache_size=0).scan(sub))
    results: list[list] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                results.append(_key(scanner.scan(sub)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 20 and all(r == expected for r in results)
    assert len(scanner.references) == 1
