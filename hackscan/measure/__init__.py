"""hackscan measuring itself: recall and false-positive rate on annotated corpora (``annotated``), and
mutation adequacy, the fraction of automatically injected hacks each stage detects (``adequacy``)."""

from __future__ import annotations

__all__ = ["annotated", "adequacy", "mutators", "seeds"]
