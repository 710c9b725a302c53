"""Fixture annotations: rule and line, and where stated, the severity the finding must have."""

from __future__ import annotations

from hackscan.annotations import parse_annotations

SRC = """\
torch.backends.cudnn.allow_tf32 = True  # expect: HS172 warning
y = self.linear(x)  # expect: HS106, HS105 info
    if (flag) {  // expect: HS212\tERROR
# legit-for: HS130, HS131
"""


def test_severity_is_parsed_only_where_stated() -> None:
    ann = parse_annotations(SRC)
    assert ann.expected == {("HS172", 1), ("HS106", 2), ("HS105", 2), ("HS212", 3)}
    # "ERROR" is not a severity word (they are lower case, as in the rule files): the id still counts
    assert ann.severities == {("HS172", 1): "warning", ("HS105", 2): "info"}
    assert ann.legit_for == {"HS130", "HS131"}


def test_a_different_severity_is_a_mismatch_and_an_unstated_one_is_not() -> None:
    ann = parse_annotations(SRC)
    found = [("HS172", 1, "error"), ("HS106", 2, "error"), ("HS105", 2, "info"), ("HS212", 3, "warning")]
    assert ann.severity_mismatches(found) == ["HS172@1: expected warning, found error"]


def test_restricting_rules_drops_their_severities() -> None:
    ann = parse_annotations(SRC).restricted({"HS105"})
    assert ann.severities == {("HS105", 2): "info"}
    assert ann.severity_mismatches([("HS172", 1, "error")]) == []


def test_may_allows_a_finding_on_its_line_without_requiring_it() -> None:
    from hackscan.annotations import compare

    src = "def forward(self, x):  # expect: HS606  # may: HS604\n    return x  # expect: HS101\n"
    ann = parse_annotations(src)
    assert ann.expected == {("HS606", 1), ("HS101", 2)} and ann.optional == {("HS604", 1)}
    assert compare("f", ann, {("HS606", 1), ("HS101", 2)}).ok
    assert compare("f", ann, {("HS606", 1), ("HS101", 2), ("HS604", 1)}).ok
    # only on its own line, and never in place of the finding the fixture is about
    assert not compare("f", ann, {("HS606", 1), ("HS101", 2), ("HS604", 2)}).ok
    assert not compare("f", ann, {("HS604", 1), ("HS101", 2)}).ok
    assert ann.restricted({"HS606"}).optional == frozenset()
