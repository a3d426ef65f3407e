"""Fail CI unless the junit report shows tests ran, none failed, and none was skipped.

No test of this project may skip: a test that needs Redis or Spark fails when they are
missing, so any skip is a hole in the evidence. Usage: python tools/check_junit.py FILE
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def main(path: str) -> int:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    skipped = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("skipped") is not None
    ]
    print(
        f"junit: {totals['tests']} tests, {totals['failures']} failures, "
        f"{totals['errors']} errors, {len(skipped)} skipped"
    )
    problems = []
    if totals["tests"] == 0:
        problems.append("no test ran")
    if totals["failures"] or totals["errors"]:
        problems.append("failures or errors")
    if skipped:
        problems.append("skipped tests: " + ", ".join(skipped))
    for problem in problems:
        print(f"CI check failed: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".artifacts/junit.xml"))
