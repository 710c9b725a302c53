"""Print the corpus records benchmarks/labelled_gpu.txt names (1-based record numbers of the
labelled sample, benchmarks/cuda_l1_labels.jsonl), as JSONL, from .gl/corpus.jsonl."""

from pathlib import Path

root = Path(__file__).resolve().parent.parent
lines = (root / ".gl" / "corpus.jsonl").read_text().splitlines()
for entry in (root / "benchmarks" / "labelled_gpu.txt").read_text().splitlines():
    if entry.strip() and not entry.startswith("#"):
        print(lines[int(entry) - 1])
